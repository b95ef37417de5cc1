// A config file a test writes for itself, named apart from concurrent runs of the same tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace ds::test_support {

inline std::string write_config(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_" + name;
    std::ofstream(path) << text;
    return path;
}

}  // namespace ds::test_support
