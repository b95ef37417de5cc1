// Round trip of a tiny step through the gateway against a raw Asio echo of the same frame sizes,
// measured in the same run: p50/p99 of one client's sequential calls, and steps/s of 16 clients
// (each one call at a time). The step: sample, bs 1, V 64, TP 2, CPU backend, logits from the
// server's synthetic model. Also the same step through ds::group directly (no sockets).
//
//   bench_gateway_latency [CALLS] [SECONDS]   (defaults 3000 calls, 3 s per throughput run)
#include <fmt/format.h>
#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "bench/percentiles.h"
#include "clients/cpp/distsample_client.h"
#include "core/status.h"
#include "gateway/server.h"
#include "sources/synthetic_logits.h"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using namespace ds;
namespace wire = distsample::wire;

constexpr int kClients = 16;

using ds::bench::of;
using ds::bench::percentiles;

// Answers every frame it reads with `reply` (a gateway reply frame, so the sizes are the same
// and the client parses it as it does the gateway's), doing nothing else.
class echo_server {
   public:
    explicit echo_server(std::string reply) : reply_(std::move(reply)) {
        acceptor_.open(tcp::v4());
        acceptor_.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        acceptor_.listen();
        accept();
        for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
    }
    ~echo_server() {
        io_.stop();
        for (std::thread& t : threads_) t.join();
    }
    uint16_t port() const { return acceptor_.local_endpoint().port(); }

   private:
    struct session : std::enable_shared_from_this<session> {
        tcp::socket socket;
        const std::string& reply;
        std::array<uint8_t, 4> header{};
        std::vector<uint8_t> payload;
        session(tcp::socket s, const std::string& r) : socket(std::move(s)), reply(r) {}
        void read() {
            asio::async_read(
                socket, asio::buffer(header), [self = shared_from_this()](boost::system::error_code ec, size_t) {
                    if (ec) return;
                    const uint32_t n = (uint32_t{self->header[0]} << 24) | (uint32_t{self->header[1]} << 16) |
                                       (uint32_t{self->header[2]} << 8) | self->header[3];
                    self->payload.resize(n);
                    asio::async_read(self->socket, asio::buffer(self->payload),
                                     [self](boost::system::error_code ec2, size_t) {
                                         if (ec2) return;
                                         asio::async_write(self->socket, asio::buffer(self->reply),
                                                           [self](boost::system::error_code ec3, size_t) {
                                                               if (!ec3) self->read();
                                                           });
                                     });
                });
        }
    };
    void accept() {
        acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
            if (ec) return;
            s.set_option(tcp::no_delay(true));
            std::make_shared<session>(std::move(s), reply_)->read();
            accept();
        });
    }

    std::string reply_;
    asio::io_context io_;
    tcp::acceptor acceptor_{io_};
    std::vector<std::thread> threads_;
};

wire::Request tiny_step(int32_t slot, int64_t position) {
    wire::Request r;
    r.mutable_sample_step()->add_slots(slot);
    r.mutable_sample_step()->add_positions(position);
    return r;
}

// One call: send the step, wait for its reply.
bool call(client::gateway_client& c, int32_t slot, int64_t position) {
    wire::Request r = tiny_step(slot, position);
    uint64_t id = 0;
    wire::Reply reply;
    return c.send(r, id).is_ok() && c.receive(reply).is_ok();
}

percentiles latency(client::gateway_client& c, int32_t slot, int calls) {
    std::vector<double> us;
    for (int i = 0; i < calls + 200; ++i) {  // the first 200 warm up
        const auto start = clock_type::now();
        if (!call(c, slot, i)) std::abort();
        if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
    }
    return of(us);
}

// Steps per second of kClients clients, each one call at a time, for `seconds`.
double throughput(const std::string& address, const std::vector<int32_t>& slots, double seconds) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < kClients; ++i) {
        threads.emplace_back([&, i] {
            std::unique_ptr<client::gateway_client> c;
            if (!client::gateway_client::connect(address, "", c).is_ok()) std::abort();
            for (int64_t k = 0; !stop.load(std::memory_order_relaxed); ++k) {
                if (!call(*c, slots[static_cast<size_t>(i)], k)) std::abort();
                done.fetch_add(1, std::memory_order_relaxed);
            }
        });
    }
    const auto start = clock_type::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    const int64_t count = done.load();
    const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    for (std::thread& t : threads) t.join();
    return static_cast<double>(count) / elapsed;
}

// The frame sizes the echo mirrors: a tiny step's request and its reply.
status frame_sizes(client::gateway_client& c, int32_t slot, std::string& request_frame, std::string& reply_frame) {
    wire::Request probe = tiny_step(slot, 0);
    probe.set_version(gateway::kProtocolVersion);
    probe.set_request_id(1000);
    gateway::append_frame(probe, request_frame);
    wire::Request sized = tiny_step(slot, 0);
    wire::Reply reply;
    DS_TRY(c.call(sized, reply));
    gateway::append_frame(reply, reply_frame);
    return status::success();
}

// The step without the gateway: ds::group::step on the model's row.
result<percentiles> direct_latency(group& ranks, const synthetic_lm& model, int32_t slot, int calls) {
    const group_config& config = ranks.config();
    std::vector<float> row(static_cast<size_t>(config.limits.vocab_size));
    model.logits(1, row.data());
    std::vector<double> us;
    for (int i = 0; i < calls + 200; ++i) {
        step_request step;
        step.slots = {slot};
        step.positions = {i};
        step.shards = split_vocab(
            logits_view{row.data(), logits_dtype::f32, 1, config.limits.vocab_size, config.limits.vocab_size},
            config.distribution.tp);
        const auto start = clock_type::now();
        DS_TRY(ranks.step(std::move(step)).result);
        if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
    }
    return of(us);
}

struct figures {
    percentiles direct, gateway_rt, echo_rt;
    double gateway_rate = 0, echo_rate = 0;
    std::size_t request_bytes = 0, reply_bytes = 0;
};

void print_figures(const group_config& config, int calls, double seconds, const figures& f) {
    fmt::print(
        "tiny step: sample, bs 1, V {}, TP {}, CPU backend, {} mode; request frame {} B, reply frame {} B; {} calls, "
        "{} clients for {} s\n",
        config.limits.vocab_size, config.distribution.tp, mode_name(config.distribution.mode), f.request_bytes,
        f.reply_bytes, calls, kClients, seconds);
    fmt::print("{:<34} {:>10} {:>10} {:>14}\n", "", "p50 (us)", "p99 (us)", "steps/s x16");
    fmt::print("{:<34} {:>10.1f} {:>10.1f} {:>14}\n", "ds::group::step (no sockets)", f.direct.p50, f.direct.p99, "-");
    fmt::print("{:<34} {:>10.1f} {:>10.1f} {:>14.0f}\n", "gateway round trip (TCP loopback)", f.gateway_rt.p50,
               f.gateway_rt.p99, f.gateway_rate);
    fmt::print("{:<34} {:>10.1f} {:>10.1f} {:>14.0f}\n", "raw Asio echo, same frame sizes", f.echo_rt.p50,
               f.echo_rt.p99, f.echo_rate);
    fmt::print(
        "gateway / echo: p50 {:.1f}x, p99 {:.1f}x, throughput {:.2f}x; gateway p50 minus direct step: {:.1f} us\n",
        f.gateway_rt.p50 / f.echo_rt.p50, f.gateway_rt.p99 / f.echo_rt.p99, f.gateway_rate / f.echo_rate,
        f.gateway_rt.p50 - f.direct.p50);
}

// The direct step, the gateway and the echo server, measured in one run.
status run(int calls, double seconds) {
    group_config config;
    config.distribution.tp = 2;
    config.limits.vocab_size = 64;
    config.limits.max_batch = 4;
    config.limits.max_tokens_per_req = 4;
    config.limits.max_slots = kClients + 2;
    std::unique_ptr<group> ranks;
    DS_TRY(group::create(config, ranks));
    synthetic_lm_config model_config;
    model_config.vocab_size = config.limits.vocab_size;
    const synthetic_lm model(model_config);
    gateway_config gw;
    gw.port = 0;
    gw.metrics_port = -1;
    gateway::server server(gw, *ranks, &model);
    DS_TRY(server.start());
    const std::string address = fmt::format("127.0.0.1:{}", server.tcp_port());
    std::unique_ptr<client::gateway_client> c;
    DS_TRY(client::gateway_client::connect(address, "", c));
    std::vector<int32_t> slots(kClients, 0);
    for (int32_t& slot : slots) {
        wire::SamplingParams p;
        p.set_temperature(0.8f);
        DS_TRY(c->register_request(p, {1, 2}, slot));
    }
    std::string request_frame, reply_frame;
    DS_TRY(frame_sizes(*c, slots[0], request_frame, reply_frame));

    figures f;
    f.request_bytes = request_frame.size();
    f.reply_bytes = reply_frame.size();
    DS_TRY_ASSIGN(f.direct, direct_latency(*ranks, model, slots[0], calls));
    f.gateway_rt = latency(*c, slots[0], calls);
    f.gateway_rate = throughput(address, slots, seconds);
    echo_server echo(reply_frame);
    const std::string echo_address = fmt::format("127.0.0.1:{}", echo.port());
    std::unique_ptr<client::gateway_client> e;
    DS_TRY(client::gateway_client::connect(echo_address, "", e));
    f.echo_rt = latency(*e, slots[0], calls);
    f.echo_rate = throughput(echo_address, slots, seconds);
    print_figures(config, calls, seconds, f);
    server.stop();
    return status::success();
}

}  // namespace

int main(int argc, char** argv) {
    const int calls = argc > 1 ? std::atoi(argv[1]) : 3000;
    const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
    if (status s = run(calls, seconds); !s.is_ok()) {
        fmt::print(stderr, "error: {}\n", s.message);
        return 1;
    }
    return 0;
}
