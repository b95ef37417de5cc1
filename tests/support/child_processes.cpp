#include "support/child_processes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace ds {

std::string sibling_binary(const std::string& name) {
    std::string self(4096, '\0');
    const ssize_t size = ::readlink("/proc/self/exe", self.data(), self.size());
    self.resize(size > 0 ? static_cast<size_t>(size) : 0);
    return self.substr(0, self.rfind('/') + 1) + name;
}

child_processes::~child_processes() {
    for (pid_t pid : running_) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }
}

bool child_processes::start(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
        ::execvp(argv[0], argv.data());
        ::_exit(127);
    }
    running_.push_back(pid);
    return true;
}

std::vector<int> child_processes::wait_all(std::chrono::milliseconds timeout) {
    std::vector<int> codes;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (pid_t pid : running_) {
        int wstatus = 0;
        pid_t done = 0;
        while ((done = ::waitpid(pid, &wstatus, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        if (done == 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
            codes.push_back(-1000);
        } else {
            codes.push_back(WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -WTERMSIG(wstatus));
        }
    }
    running_.clear();
    return codes;
}

}  // namespace ds
