// Which memory the ucx transport swaps in (transport/ucx_memory_path.h): every row of the table,
// and the start-up errors that say why and what to set instead. No GPU and no UCX needed.
#include <gtest/gtest.h>

#include "transport/ucx_memory_path.h"

namespace ds {
namespace {

ucx_memory_facts facts(bool backend_on_device, bool cuda_built, bool ucx_has_cuda, bool gpu_transport = true) {
    return {backend_on_device, cuda_built, ucx_has_cuda, gpu_transport, "1.13.1"};
}

struct choice_case {
    ucx_memory_mode requested;
    ucx_memory_facts facts;
    ucx_memory_path expected;
};

TEST(UcxMemoryPath, FollowsTheTable) {
    const choice_case cases[] = {
        // The cpu backend samples host memory whatever UCX can do.
        {ucx_memory_mode::automatic, facts(false, true, true), ucx_memory_path::host},
        {ucx_memory_mode::automatic, facts(false, false, false), ucx_memory_path::host},
        {ucx_memory_mode::staged, facts(false, true, true), ucx_memory_path::host},
        // The cuda backend: direct only where both the build and UCX have CUDA.
        {ucx_memory_mode::automatic, facts(true, true, true), ucx_memory_path::direct},
        {ucx_memory_mode::automatic, facts(true, true, false), ucx_memory_path::staged},
        {ucx_memory_mode::automatic, facts(true, false, true), ucx_memory_path::staged},
        {ucx_memory_mode::automatic, facts(true, true, true, false), ucx_memory_path::staged},
        {ucx_memory_mode::staged, facts(true, true, true), ucx_memory_path::staged},
        {ucx_memory_mode::staged, facts(true, true, false), ucx_memory_path::staged},
        {ucx_memory_mode::direct, facts(true, true, true), ucx_memory_path::direct},
    };
    for (const choice_case& c : cases) {
        ucx_memory_choice choice;
        const status s = choose_ucx_memory_path(c.requested, c.facts, choice);
        SCOPED_TRACE(
            std::string(ucx_memory_mode_name(c.requested)) + " device=" + std::to_string(c.facts.backend_on_device) +
            " cuda=" + std::to_string(c.facts.cuda_built) + " ucx_cuda=" + std::to_string(c.facts.ucx_has_cuda));
        ASSERT_TRUE(s.is_ok()) << s.message;
        EXPECT_EQ(choice.path, c.expected);
        // The log line says what was asked for.
        EXPECT_NE(choice.reason.find(std::string("'") + ucx_memory_mode_name(c.requested) + "'"), std::string::npos)
            << choice.reason;
    }
}

TEST(UcxMemoryPath, AutoSaysWhyItStages) {
    ucx_memory_choice choice;
    ASSERT_TRUE(choose_ucx_memory_path(ucx_memory_mode::automatic, facts(true, true, false), choice).is_ok());
    EXPECT_NE(choice.reason.find("UCX 1.13.1 reports no CUDA memory support"), std::string::npos) << choice.reason;
    EXPECT_NE(choice.reason.find("pinned host buffers"), std::string::npos) << choice.reason;
    ASSERT_TRUE(choose_ucx_memory_path(ucx_memory_mode::automatic, facts(true, false, false), choice).is_ok());
    EXPECT_NE(choice.reason.find("this build has no CUDA support"), std::string::npos) << choice.reason;
}

TEST(UcxMemoryPath, UnavailableDirectIsAStartUpErrorSayingWhatToSet) {
    struct refused_case {
        ucx_memory_facts facts;
        const char* why;
    };
    const refused_case cases[] = {
        {facts(true, true, false), "the loaded UCX 1.13.1 reports no CUDA memory support"},
        {facts(true, false, true), "this build has no CUDA support"},
        {facts(false, true, true), "needs backend = 'cuda'"},
        {facts(true, true, true, false), "has no transport here that puts GPU memory"},
    };
    for (const refused_case& c : cases) {
        ucx_memory_choice choice;
        const status s = choose_ucx_memory_path(ucx_memory_mode::direct, c.facts, choice);
        EXPECT_EQ(s.code, status_code::unsupported);
        EXPECT_NE(s.message.find("ucx_device_memory = 'direct'"), std::string::npos) << s.message;
        EXPECT_NE(s.message.find(c.why), std::string::npos) << s.message;
        EXPECT_NE(s.message.find("set ucx_device_memory = auto or staged"), std::string::npos) << s.message;
        EXPECT_NE(s.message.find("DISTSAMPLE_UCX_DEVICE_MEMORY"), std::string::npos) << s.message;
    }
}

TEST(UcxMemoryPath, GpuTransportsAreCudaIpcAndRdma) {
    EXPECT_TRUE(carries_gpu_memory("lane[0]:  3:rc_mlx5/mlx5_0:1 md[2] -> rma"));
    EXPECT_TRUE(carries_gpu_memory("#   resource 4  :  md 3  dev 2  flags -- dc_mlx5/mlx5_0:1"));
    EXPECT_TRUE(carries_gpu_memory(
        "lane[3]:  6:cuda_ipc/cuda.0 md[5]         -> md[5]/cuda_ipc/sysdev[0] seg 4294967295 rma_bw#0"));
    EXPECT_TRUE(carries_gpu_memory("sysv/memory.0, posix/memory.0, cuda_ipc/cuda.0"));
    EXPECT_FALSE(carries_gpu_memory("lane[0]:  2:tcp/lo.0 md[1] -> am keepalive wireup"));
    // cuda_copy moves GPU memory within a process only.
    EXPECT_FALSE(carries_gpu_memory("cuda_copy/cuda, tcp/lo, posix/memory"));
}

TEST(UcxMemoryMode, NamesRoundTrip) {
    for (const ucx_memory_mode mode : {ucx_memory_mode::automatic, ucx_memory_mode::direct, ucx_memory_mode::staged}) {
        const result<ucx_memory_mode> parsed = parse_ucx_memory_mode(ucx_memory_mode_name(mode));
        ASSERT_TRUE(parsed.is_ok());
        EXPECT_EQ(*parsed, mode);
    }
    EXPECT_FALSE(parse_ucx_memory_mode("gpu").is_ok());
    EXPECT_FALSE(parse_ucx_memory_mode("automatic").is_ok());
}

}  // namespace
}  // namespace ds
