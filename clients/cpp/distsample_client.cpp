#include "clients/cpp/distsample_client.h"

#include <fmt/format.h>
#include <boost/asio.hpp>

#include <array>

namespace ds::client {

namespace asio = boost::asio;
using generic_socket = asio::generic::stream_protocol::socket;

struct gateway_client::impl {
    asio::io_context io;
    generic_socket socket{io};
    gateway::frame_reader reader;
    std::array<uint8_t, 65536> chunk{};
    uint64_t next_id = 1;

    explicit impl(uint32_t max_frame_bytes) : reader(max_frame_bytes) {}
};

namespace {

status io_error(const char* what, const boost::system::error_code& ec) {
    return {status_code::aborted, fmt::format("gateway {}: {}", what, ec.message())};
}

}  // namespace

gateway_client::gateway_client(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
gateway_client::~gateway_client() = default;

status gateway_client::connect(const std::string& address, const std::string& secret,
                               std::unique_ptr<gateway_client>& out, uint32_t max_frame_bytes) {
    auto state = std::make_unique<impl>(max_frame_bytes);
    boost::system::error_code ec;
    if (address.rfind("unix:", 0) == 0) {
        const asio::local::stream_protocol::endpoint endpoint(address.substr(5));
        state->socket.connect(asio::generic::stream_protocol::endpoint(endpoint), ec);
    } else {
        const size_t colon = address.rfind(':');
        if (colon == std::string::npos)
            return status::invalid(fmt::format("address '{}': expected host:port or unix:/path", address));
        asio::ip::tcp::resolver resolver(state->io);
        const auto endpoints = resolver.resolve(address.substr(0, colon), address.substr(colon + 1), ec);
        if (ec) return io_error("resolve", ec);
        for (const auto& entry : endpoints) {
            state->socket = generic_socket(state->io);
            state->socket.connect(asio::generic::stream_protocol::endpoint(entry.endpoint()), ec);
            if (!ec) {
                // Small frames go out at once (no Nagle delay).
                state->socket.set_option(asio::detail::socket_option::boolean<IPPROTO_TCP, TCP_NODELAY>(true), ec);
                break;
            }
        }
    }
    if (ec) return io_error(fmt::format("connect to {}", address).c_str(), ec);
    std::unique_ptr<gateway_client> client(new gateway_client(std::move(state)));
    if (!secret.empty()) {
        wire::Request auth;
        auth.mutable_auth()->set_secret(secret);
        wire::Reply reply;
        if (status s = client->call(auth, reply); !s.is_ok()) return s;
    }
    out = std::move(client);
    return status::success();
}

status gateway_client::send(wire::Request& request, uint64_t& request_id) {
    request.set_version(gateway::kProtocolVersion);
    request_id = impl_->next_id++;
    request.set_request_id(request_id);
    std::string frame;
    gateway::append_frame(request, frame);
    boost::system::error_code ec;
    asio::write(impl_->socket, asio::buffer(frame), ec);
    return ec ? io_error("write", ec) : status::success();
}

status gateway_client::receive(wire::Reply& reply) {
    const uint8_t* payload = nullptr;
    size_t size = 0;
    wire::Error error;
    for (;;) {
        const auto r = impl_->reader.next(payload, size, error);
        if (r == gateway::frame_reader::result::error)
            return {status_code::aborted, "gateway reply: " + error.message()};
        if (r == gateway::frame_reader::result::frame) break;
        boost::system::error_code ec;
        const size_t n = impl_->socket.read_some(asio::buffer(impl_->chunk), ec);
        if (ec == asio::error::eof)
            return {status_code::aborted, "gateway read: the gateway closed the connection before replying; reconnect"};
        if (ec) return io_error("read", ec);
        impl_->reader.append(impl_->chunk.data(), n);
    }
    if (!reply.ParseFromArray(payload, static_cast<int>(size)))
        return {status_code::aborted, "gateway reply: not a Reply message"};
    return status::success();
}

status gateway_client::call(wire::Request& request, wire::Reply& reply) {
    uint64_t id = 0;
    if (status s = send(request, id); !s.is_ok()) return s;
    if (status s = receive(reply); !s.is_ok()) return s;
    return status_of(reply);
}

status gateway_client::status_of(const wire::Reply& reply) {
    if (!reply.has_error()) return status::success();
    const wire::Error& e = reply.error();
    const status_code code = e.code() == wire::Error::BAD_FIELD || e.code() == wire::Error::UNKNOWN_SLOT
                                 ? status_code::invalid_argument
                             : e.code() == wire::Error::TIMEOUT ? status_code::timeout
                                                                : status_code::aborted;
    return {code, fmt::format("{} {}: {}", wire::Error::Code_Name(e.code()), e.field(), e.message())};
}

status gateway_client::register_request(const wire::SamplingParams& params, const std::vector<int32_t>& history,
                                        int32_t& slot) {
    wire::Request request;
    wire::Register& m = *request.mutable_register_();
    m.set_slot(slot);
    *m.mutable_params() = params;
    m.mutable_history()->Add(history.begin(), history.end());
    wire::Reply reply;
    if (status s = call(request, reply); !s.is_ok()) return s;
    slot = reply.registered().slot();
    return status::success();
}

status gateway_client::release(int32_t slot) {
    wire::Request request;
    request.mutable_release()->set_slot(slot);
    wire::Reply reply;
    return call(request, reply);
}

status gateway_client::step(const wire::Step& step, bool verify, wire::StepReply& out) {
    wire::Request request;
    *(verify ? request.mutable_verify_step() : request.mutable_sample_step()) = step;
    wire::Reply reply;
    if (status s = call(request, reply); !s.is_ok()) return s;
    out = reply.step();
    return status::success();
}

status gateway_client::stats(wire::StatsReply& out) {
    wire::Request request;
    request.mutable_stats();
    wire::Reply reply;
    if (status s = call(request, reply); !s.is_ok()) return s;
    out = reply.stats();
    return status::success();
}

}  // namespace ds::client
