// Transport selection: every name gives the backend the table in transport_factory.h promises,
// or an error at start-up that says why and what to set instead.
#include <gtest/gtest.h>

#include "collective_script.h"
#include "transport/tcp_bootstrap.h"
#include "transport/transport_factory.h"

namespace ds {
namespace {

transport_config two_ranks() {
    transport_config config = script_transport_config();
    config.world_size = 2;
    return config;
}

TEST(TransportFactory, RanksAsThreadsGetTheBackendTheyAskFor) {
    std::unique_ptr<transport_group> group;
    ASSERT_TRUE(make_transport_group(transport_kind::automatic, two_ranks(), {}, group).is_ok());
    EXPECT_STREQ(group->backend_name(), "local");
    ASSERT_TRUE(make_transport_group(transport_kind::local, two_ranks(), {}, group).is_ok());
    EXPECT_STREQ(group->backend_name(), "local");
#ifdef DISTSAMPLE_HAVE_UCX
    ASSERT_TRUE(make_transport_group(transport_kind::ucx, two_ranks(), {}, group).is_ok());
    EXPECT_STREQ(group->backend_name(), "ucx");
    EXPECT_EQ(built_transports().at(1), "ucx");
#else
    const status s = make_transport_group(transport_kind::ucx, two_ranks(), {}, group);
    EXPECT_EQ(s.code, status_code::unsupported);
    EXPECT_NE(s.message.find("DISTSAMPLE_WITH_UCX"), std::string::npos) << s.message;
#endif
}

TEST(TransportFactory, AnUnavailableBackendSaysWhyAndWhatToSet) {
    std::unique_ptr<transport_group> group;
    status s = make_transport_group(transport_kind::nccl, two_ranks(), {}, group);
    EXPECT_EQ(s.code, status_code::unsupported);
    EXPECT_NE(s.message.find("transport 'nccl' is not available"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("set transport = auto, local or ucx"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("DISTSAMPLE_TRANSPORT"), std::string::npos) << s.message;
    s = parse_transport_kind("tcp").to_status();
    EXPECT_EQ(s.code, status_code::invalid_argument);
    EXPECT_NE(s.message.find("'auto' 'local' 'ucx' 'nccl'"), std::string::npos) << s.message;
}

TEST(TransportFactory, RankProcessesCannotUseTheLocalTransport) {
    // No rendezvous runs: the factory must refuse before it tries to meet anyone.
    tcp_bootstrap boot("127.0.0.1", 1, 0, 2, std::chrono::milliseconds(100));
    std::unique_ptr<transport> endpoint;
    status s = make_rank_transport(transport_kind::local, two_ranks(), {}, boot, endpoint);
    EXPECT_EQ(s.code, status_code::unsupported);
    EXPECT_NE(s.message.find("threads of one process"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("set transport = ucx or auto"), std::string::npos) << s.message;
    s = make_rank_transport(transport_kind::nccl, two_ranks(), {}, boot, endpoint);
#ifdef DISTSAMPLE_HAVE_NCCL
    // Built with NCCL it tries, and the missing GPU or rendezvous stops it.
    EXPECT_FALSE(s.is_ok());
#else
    EXPECT_EQ(s.code, status_code::unsupported);
#endif
}

}  // namespace
}  // namespace ds
