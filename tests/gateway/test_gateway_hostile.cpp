// Hostile clients against the gateway, each bounded in time and on loopback only: too many
// connections, frames larger than authentication allows, a buffered-bytes budget, slowloris
// connections on TCP, the Unix socket and the metrics port, an accept loop out of file
// descriptors, fault injection without the secret and a Clear that must wake a delayed rank, a
// slot taken twice (in one step, or by another connection), a second server on a live Unix socket.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "config/gateway_config.h"
#include "gateway_harness.h"

namespace ds::gateway {
namespace {

using std::chrono::milliseconds;
using testing::header;
using testing::raw_connection;
using testing::running_gateway;
using testing::stats_frame;
using clock_type = std::chrono::steady_clock;

constexpr const char* kSecret = "hostile";

// A gateway with short deadlines, so that a test waits for them briefly.
running_gateway short_deadlines_gateway(const std::string& secret,
                                        const std::function<void(gateway_config&)>& more = {}) {
    return running_gateway(secret, 1 << 20, testing::small_group_config(), [&](gateway_config& c) {
        c.auth_timeout_ms = 300;
        c.read_timeout_ms = 300;
        c.idle_timeout_ms = 600;
        if (more) more(c);
    });
}

// Reads the reply the server closes a connection with: its error code, message and field.
wire::Error closing_error(raw_connection& raw) {
    wire::Reply reply;
    if (!raw.receive(reply, milliseconds(5000)) || !reply.has_error()) return wire::Error{};
    return reply.error();
}

// Whether `happened` comes true within `within`, asked again every 20 ms: for what the server
// does after a client has gone (it lets a connection go on its own time).
bool eventually(milliseconds within, const std::function<bool()>& happened) {
    for (const auto until = clock_type::now() + within; clock_type::now() < until;) {
        if (happened()) return true;
        std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
}

// Whether a new connection's Stats request is answered.
bool served(const running_gateway& gw) {
    raw_connection next(gw.gateway->tcp_port());
    next.send(stats_frame());
    wire::Reply reply;
    return next.receive(reply, milliseconds(2000)) && reply.has_stats();
}

TEST(GatewayHostile, ConnectionsPastTheLimitAreRefusedAndTheSlotComesBack) {
    running_gateway gw("", 1 << 20, testing::small_group_config(), [](gateway_config& c) { c.max_connections = 2; });
    auto first = gw.connect();
    auto second = gw.connect();
    raw_connection third(gw.gateway->tcp_port());
    const wire::Error refused = closing_error(third);
    EXPECT_EQ(refused.code(), wire::Error::LIMIT_EXCEEDED) << refused.message();
    EXPECT_NE(refused.message().find("gateway.max_connections = 2"), std::string::npos) << refused.message();
    EXPECT_TRUE(third.closed_within(milliseconds(2000)));
    wire::StatsReply stats;
    EXPECT_TRUE(first->stats(stats).is_ok()) << "the admitted connections are served";
    second.reset();
    // The closed connection's place is free once the server has let it go.
    EXPECT_TRUE(eventually(milliseconds(5000), [&] { return served(gw); }));
    EXPECT_GE(gw.gateway->metrics().connections_refused.load(), 1u);
}

TEST(GatewayHostile, BeforeAuthenticationAFrameIsAtMostAnAuthFrame) {
    running_gateway gw(kSecret);
    raw_connection raw(gw.gateway->tcp_port());
    raw.send(header(1 << 20));  // declares a megabyte, sends none of it: refused from the header alone
    const wire::Error error = closing_error(raw);
    EXPECT_EQ(error.code(), wire::Error::FRAME_TOO_LARGE) << error.message();
    EXPECT_NE(error.message().find("before authentication"), std::string::npos) << error.message();
}

TEST(GatewayHostile, BufferedBytesPastTheBudgetCloseTheConnectionThatBroughtThem) {
    running_gateway gw("", 60000, testing::small_group_config(),
                       [](gateway_config& c) { c.max_buffered_bytes = 1 << 16; });
    raw_connection hoarder(gw.gateway->tcp_port());
    hoarder.send(header(59000) + std::string(50000, 'x'));  // an unfinished frame the server holds
    std::this_thread::sleep_for(milliseconds(200));
    raw_connection late(gw.gateway->tcp_port());
    late.send(header(59000) + std::string(20000, 'y'));  // past 64 KiB together
    const wire::Error error = closing_error(late);
    EXPECT_EQ(error.code(), wire::Error::LIMIT_EXCEEDED) << error.message();
    EXPECT_NE(error.message().find("gateway.max_buffered_bytes = 65536"), std::string::npos) << error.message();
    // The hoarder's bytes go back to the budget when it goes: a small request is served again.
    hoarder.socket.close();
    EXPECT_TRUE(eventually(milliseconds(5000), [&] { return served(gw); }));
}

// Slowloris: what the client leaves unfinished, and the deadline that closes it.
struct slow_client {
    const char* name;
    std::string bytes;
    const char* key;
};

class GatewaySlowClients : public ::testing::TestWithParam<bool> {};  // over the Unix socket?

TEST_P(GatewaySlowClients, AreClosedAtTheirDeadlineNamingIt) {
    running_gateway gw = short_deadlines_gateway("");
    const bool unix = GetParam();
    const slow_client cases[] = {
        {"idle", "", "idle_timeout_ms"},
        {"half a length prefix", header(40).substr(0, 2), "read_timeout_ms"},
        {"half a frame", header(40) + std::string(20, 'x'), "read_timeout_ms"},
    };
    for (const slow_client& c : cases) {
        SCOPED_TRACE(c.name);
        raw_connection raw = unix ? raw_connection(gw.config.unix_socket) : raw_connection(gw.gateway->tcp_port());
        const auto start = clock_type::now();
        if (!c.bytes.empty()) raw.send(c.bytes);
        const wire::Error error = closing_error(raw);
        EXPECT_EQ(error.code(), wire::Error::LIMIT_EXCEEDED) << error.message();
        EXPECT_NE(error.message().find(c.key), std::string::npos) << error.message();
        EXPECT_TRUE(raw.closed_within(milliseconds(3000)));
        EXPECT_LT(clock_type::now() - start, milliseconds(3000));
    }
}

INSTANTIATE_TEST_SUITE_P(Listeners, GatewaySlowClients, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? "UnixSocket" : "Tcp"; });

TEST(GatewayHostile, AClientThatNeverAuthenticatesIsClosedAtTheAuthDeadline) {
    running_gateway gw = short_deadlines_gateway(kSecret, [](gateway_config& c) { c.idle_timeout_ms = 0; });
    raw_connection raw(gw.gateway->tcp_port());
    const wire::Error error = closing_error(raw);
    EXPECT_EQ(error.code(), wire::Error::LIMIT_EXCEEDED) << error.message();
    EXPECT_NE(error.message().find("gateway.auth_timeout_ms = 300"), std::string::npos) << error.message();
    // A client that authenticates in time and then pipelines is not touched by it.
    auto c = gw.connect(kSecret);
    std::this_thread::sleep_for(milliseconds(500));
    wire::StatsReply stats;
    EXPECT_TRUE(c->stats(stats).is_ok());
}

TEST(GatewayHostile, AWrongSecretAndAMissingAuthFrameAreToldApart) {
    running_gateway gw(kSecret);
    std::unique_ptr<client::gateway_client> c;
    const status wrong = client::gateway_client::connect(gw.address(), "guess", c);
    EXPECT_NE(wrong.message.find("UNAUTHENTICATED auth.secret"), std::string::npos) << wrong.message;
    raw_connection raw(gw.gateway->tcp_port());
    raw.send(stats_frame());
    const wire::Error missing = closing_error(raw);
    EXPECT_EQ(missing.code(), wire::Error::UNAUTHENTICATED);
    EXPECT_EQ(missing.field(), "auth");
    EXPECT_NE(missing.message().find("a stats request before authentication"), std::string::npos) << missing.message();
}

TEST(GatewayHostile, TheMetricsPortClosesSlowRequestsAndRefusesPastItsLimit) {
    running_gateway gw = short_deadlines_gateway("", [](gateway_config& c) { c.max_http_connections = 1; });
    raw_connection slow(gw.gateway->metrics_port());
    slow.send("GET /metr");  // never finished
    raw_connection second(gw.gateway->metrics_port());
    std::string refused;
    std::array<char, 512> chunk{};
    if (second.readable_within(milliseconds(2000))) {
        boost::system::error_code ec;
        refused.append(chunk.data(), second.socket.read_some(boost::asio::buffer(chunk), ec));
    }
    EXPECT_NE(refused.find("503"), std::string::npos) << refused;
    EXPECT_NE(refused.find("gateway.max_http_connections = 1"), std::string::npos) << refused;
    EXPECT_TRUE(slow.closed_within(milliseconds(3000))) << "gateway.read_timeout_ms closes it";
    std::string metrics;
    EXPECT_TRUE(eventually(milliseconds(3000), [&] {
        metrics = testing::http_get(gw.gateway->metrics_port(), "/metrics");
        return metrics.find("200 OK") != std::string::npos;
    }));
    EXPECT_NE(metrics.find("distsample_limits_hit_total"), std::string::npos) << metrics;
}

// Seconds of CPU this process has used.
double cpu_seconds() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Every descriptor this process may open taken, until it goes out of scope.
class descriptors_exhausted {
   public:
    descriptors_exhausted() {
        ::getrlimit(RLIMIT_NOFILE, &saved_);
        rlimit low = saved_;
        low.rlim_cur = 256;  // above what the test has open, so that filling it up is quick
        ::setrlimit(RLIMIT_NOFILE, &low);
        for (int fd = ::open("/dev/null", O_RDONLY); fd >= 0; fd = ::open("/dev/null", O_RDONLY)) taken_.push_back(fd);
    }
    ~descriptors_exhausted() {
        for (int fd : taken_) ::close(fd);
        ::setrlimit(RLIMIT_NOFILE, &saved_);
    }
    descriptors_exhausted(const descriptors_exhausted&) = delete;
    descriptors_exhausted& operator=(const descriptors_exhausted&) = delete;

   private:
    rlimit saved_{};
    std::vector<int> taken_;
};

TEST(GatewayHostile, OutOfFileDescriptorsTheAcceptLoopBacksOffAndRecovers) {
    running_gateway gw;
    const int client = ::socket(AF_INET, SOCK_STREAM, 0);  // opened before the descriptors run out
    ASSERT_GE(client, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(gw.gateway->tcp_port());
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // Made before: without a free descriptor UBSan cannot check the vptr of a new message type.
    const std::string request = stats_frame();
    double cpu_used = 0.0;
    {
        descriptors_exhausted exhausted;
        // Queued in the listen backlog: the server's accept fails with EMFILE while this lasts.
        ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
        ASSERT_EQ(::send(client, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
        const double cpu_before = cpu_seconds();
        std::this_thread::sleep_for(milliseconds(1000));
        cpu_used = cpu_seconds() - cpu_before;
    }
    EXPECT_LT(cpu_used, 0.5) << "the io threads spun on a failing accept";
    raw_connection raw(client);
    wire::Reply reply;
    EXPECT_TRUE(raw.receive(reply, milliseconds(5000))) << "accepted and answered once descriptors are back";
    EXPECT_TRUE(reply.has_stats());
}

TEST(GatewayHostile, FaultInjectionNeedsASecret) {
    running_gateway gw;
    auto c = gw.connect();
    wire::Request inject;
    inject.mutable_inject()->add_faults("delay_kernel:rank=1:ms=3600000");
    wire::Reply reply;
    const status s = c->call(inject, reply);
    EXPECT_NE(s.message.find("FORBIDDEN inject"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("gateway.secret"), std::string::npos) << s.message;
    wire::Request clear;
    clear.mutable_clear();
    EXPECT_NE(c->call(clear, reply).message.find("FORBIDDEN clear"), std::string::npos);
    wire::StatsReply stats;
    EXPECT_TRUE(c->stats(stats).is_ok()) << "the connection stays";
}

// Registers one request on `c` and returns a one-request sample step for it.
wire::Step one_request_step(client::gateway_client& c) {
    int32_t slot = 0;
    EXPECT_TRUE(c.register_request(testing::test_params(7), {1, 2}, slot).is_ok());
    wire::Step step;
    step.add_slots(slot);
    step.add_positions(2);
    return step;
}

class GatewayClearWakes : public ::testing::TestWithParam<const char*> {};  // the delay's fault kind

TEST_P(GatewayClearWakes, ARankAsleepInAnInjectedDelay) {
    running_gateway gw(kSecret);  // step and transport timeouts of 20 s
    auto c = gw.connect(kSecret);
    const wire::Step step = one_request_step(*c);
    wire::Request inject;
    inject.mutable_inject()->add_faults(fmt::format("{}:rank=1:steps=1:ms=3600000", GetParam()));
    wire::Reply ok;
    ASSERT_TRUE(c->call(inject, ok).is_ok());
    wire::Request request;
    *request.mutable_sample_step() = step;
    uint64_t id = 0;
    ASSERT_TRUE(c->send(request, id).is_ok());
    std::this_thread::sleep_for(milliseconds(300));  // rank 1 is asleep in its hour
    const auto cleared_at = clock_type::now();
    auto other = gw.connect(kSecret);
    wire::Request clear;
    clear.mutable_clear();
    ASSERT_TRUE(other->call(clear, ok).is_ok());
    wire::Reply answered;
    ASSERT_TRUE(c->receive(answered).is_ok());
    EXPECT_EQ(answered.request_id(), id);
    EXPECT_LT(clock_type::now() - cleared_at, milliseconds(10000)) << "the step waited out the delay";
}

INSTANTIATE_TEST_SUITE_P(Delays, GatewayClearWakes, ::testing::Values("delay_kernel", "delay_transport"));

TEST(GatewayHostile, ASlotTwiceInOneStepIsRefusedByTheGatewayAndTheGroup) {
    running_gateway gw;
    auto c = gw.connect();
    wire::Step step = one_request_step(*c);
    step.add_slots(step.slots(0));
    step.add_positions(3);
    wire::StepReply reply;
    const status twice = c->step(step, false, reply);
    EXPECT_NE(twice.message.find("BAD_FIELD slots[1]"), std::string::npos) << twice.message;
    EXPECT_NE(twice.message.find("each slot once per step"), std::string::npos) << twice.message;
    // The rule is the coordinator's too: a library caller gets it as well.
    step_request direct;
    direct.slots = {3, 3};
    direct.positions = {0, 0};
    const std::vector<float> logits(2 * testing::kVocab, 0.0f);
    direct.shards = split_vocab(logits_view{logits.data(), logits_dtype::f32, 2, testing::kVocab, testing::kVocab},
                                gw.ranks->config().distribution.tp);
    const step_reply refused = gw.ranks->step(direct);
    EXPECT_EQ(refused.result.code, status_code::invalid_argument);
    EXPECT_NE(refused.result.message.find("slots[1] = 3"), std::string::npos) << refused.result.message;
}

TEST(GatewayHostile, ASlotAnotherConnectionHoldsIsNotTakenOver) {
    running_gateway gw;
    auto holder = gw.connect();
    auto intruder = gw.connect();
    auto register_slot = [](client::gateway_client& c, int32_t slot) {
        wire::Request r;
        r.mutable_register_()->set_slot(slot);
        wire::Reply reply;
        return c.call(r, reply);
    };
    ASSERT_TRUE(register_slot(*holder, 5).is_ok());
    const status taken = register_slot(*intruder, 5);
    EXPECT_NE(taken.message.find("BAD_FIELD slot"), std::string::npos) << taken.message;
    EXPECT_NE(taken.message.find("another connection holds it"), std::string::npos) << taken.message;
    EXPECT_TRUE(register_slot(*holder, 5).is_ok()) << "its own connection may register it again";
    holder.reset();  // a scheduler that reconnects takes its slots back
    EXPECT_TRUE(eventually(milliseconds(5000), [&] { return register_slot(*intruder, 5).is_ok(); }));
}

TEST(GatewayHostile, ASecondServerLeavesALiveUnixSocketAloneAndReplacesAStaleOne) {
    running_gateway gw;
    gateway_config same = gw.config;
    same.port = 0;
    server second(same, *gw.ranks, gw.model.get());
    const status refused = second.start();
    EXPECT_EQ(refused.code, status_code::invalid_argument);
    EXPECT_NE(refused.message.find("another server is listening there"), std::string::npos) << refused.message;
    second.stop();
    raw_connection still(gw.config.unix_socket);  // the first server's socket is still there and live
    still.send(stats_frame());
    wire::Reply reply;
    EXPECT_TRUE(still.receive(reply) && reply.has_stats());

    // A socket file nobody listens on, as a killed server leaves it.
    const std::string stale = ::testing::TempDir() + "/ds_gateway_stale_" + std::to_string(::getpid()) + ".sock";
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    stale.copy(address.sun_path, sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ::close(fd);
    gateway_config replacing = gw.config;
    replacing.port = 0;
    replacing.unix_socket = stale;
    server third(replacing, *gw.ranks, gw.model.get());
    ASSERT_TRUE(third.start().is_ok());
    third.stop();
    EXPECT_NE(::access(stale.c_str(), F_OK), 0) << "its own socket file is removed when it stops";
}

TEST(GatewayHostile, PortZeroTakesAFreeMetricsPortUnlessOneIsChosen) {
    gateway_config config;
    ASSERT_TRUE(load_gateway_config("", {"gateway.port=0"}, config).is_ok());
    EXPECT_EQ(config.metrics_port, 0);
    gateway_config chosen;
    ASSERT_TRUE(load_gateway_config("", {"gateway.port=0", "gateway.metrics_port=9999"}, chosen).is_ok());
    EXPECT_EQ(chosen.metrics_port, 9999);
    // Two servers on free ports side by side, both with metrics.
    running_gateway a("", 1 << 20, testing::small_group_config(), [&](gateway_config& c) {
        c.metrics_port = config.metrics_port;
        c.unix_socket.clear();
    });
    running_gateway b("", 1 << 20, testing::small_group_config(), [&](gateway_config& c) {
        c.metrics_port = config.metrics_port;
        c.unix_socket.clear();
    });
    EXPECT_NE(a.gateway->metrics_port(), b.gateway->metrics_port());
}

}  // namespace
}  // namespace ds::gateway
