// Processes a test starts (rank processes, rendezvous servers): killed and reaped on destruction,
// whatever happened to the test, so no test leaves a process behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ds {

// The path of the binary `name` in the directory of the running test binary: the build puts
// helper binaries there, and a bundle carried to another machine keeps them together.
std::string sibling_binary(const std::string& name);

class child_processes {
   public:
    child_processes() = default;
    child_processes(const child_processes&) = delete;
    child_processes& operator=(const child_processes&) = delete;
    ~child_processes();

    // fork + execvp of args[0] with args; false when fork fails.
    bool start(const std::vector<std::string>& args);

    // Waits (bounded) for every process; returns the exit codes in start order (-signal when
    // killed by a signal, -1000 when still running at the deadline, which then kills it).
    std::vector<int> wait_all(std::chrono::milliseconds timeout);

   private:
    std::vector<pid_t> running_;
};

}  // namespace ds
