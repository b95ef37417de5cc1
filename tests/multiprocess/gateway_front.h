// The gateway in front of rank processes, as a scheduler sees it: `distsample serve
// --rank-processes` on free loopback ports and kTp `distsample rank` processes (the RemoteRanks
// fixture starts, stops and reaps them), driven with the C++ client (clients/cpp). The JSON steps
// of remote_group.h go over the wire (each request registered into slot b + 1) and come back in the
// JSON of `distsample kernel`, so the references and comparisons are the coordinator tests'.
#pragma once

#include <csignal>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "clients/cpp/distsample_client.h"
#include "multiprocess/remote_group.h"

namespace ds::remote_test {

namespace wire = distsample::wire;

constexpr const char* kSecret = "gateway-rank-processes";  // fault injection needs one

inline wire::SamplingParams wire_params(const json& request) {
    wire::SamplingParams p;
    p.set_seed(request["seed"].get<uint64_t>());
    p.set_temperature(request["temperature"].get<float>());
    if (request.contains("top_k")) p.set_top_k(request["top_k"].get<int32_t>());
    if (request.contains("top_p")) p.set_top_p(request["top_p"].get<float>());
    if (request.contains("min_p")) p.set_min_p(request["min_p"].get<float>());
    return p;
}

// The JSON step's rows on the wire: request b in slot b + 1; no logits when the step has none.
inline wire::Step wire_step(const json& step) {
    wire::Step w;
    const bool verify = step.contains("candidates");
    for (size_t b = 0; b < step["requests"].size(); ++b) {
        w.add_slots(static_cast<int32_t>(b + 1));
        w.add_positions(step["requests"][b]["position"].get<int64_t>());
        if (verify) {
            for (int token : step["candidates"][b]) w.add_candidates(token);
        }
    }
    w.set_tokens_per_req(verify ? static_cast<int32_t>(step["candidates"][0].size()) : 1);
    if (step.contains("logits")) {
        for (const json& row : step["logits"]) {
            for (float v : row) w.add_logits(v);
        }
    }
    return w;
}

// A step reply in the JSON of `distsample kernel` (less accept_index, which the wire leaves out).
inline json kernel_json(const wire::StepReply& reply, bool verify) {
    json logprobs = json::array();
    for (float v : reply.logprobs()) logprobs.push_back(std::isnan(v) ? json(nullptr) : json(v));
    const std::vector<int32_t> predict(reply.predict().begin(), reply.predict().end());
    json out =
        verify
            ? json{{"predict", predict},
                   {"accept_length", std::vector<int32_t>(reply.accept_length().begin(), reply.accept_length().end())}}
            : json{{"tokens", predict}};
    out["logprobs"] = logprobs;
    if (reply.row_errors_size() > 0)
        out["row_errors"] = std::vector<int32_t>(reply.row_errors().begin(), reply.row_errors().end());
    return out;
}

// `distsample kernel` on the step: what the gateway must answer.
inline json kernel_reference(const std::string& op, const json& step) {
    json want = kernel_output(op, step);
    want.erase("accept_index");
    return want;
}

class GatewayRankProcesses : public RemoteRanks {
   protected:
    // The gateway (its flags, then the group's), then the kTp ranks; connects once it serves.
    void start_gateway_and_ranks(const std::string& mode, const std::vector<std::string>& gateway_flags = {}) {
        start_gateway(mode, gateway_flags, [this](int rank) { return start_rank(rank); });
    }

    // The same with kTp model workers for ranks (topology.logits_source = worker, so the gateway
    // has no model); the worker of `withholding_rank` withholds step `withhold_step`'s logits.
    void start_gateway_and_workers(const std::string& mode, int withholding_rank = -1, int withhold_step = 0) {
        extra_args_.insert(extra_args_.end(), {"--set", "topology.logits_source=worker"});
        start_gateway(mode, {"--model", "none"},
                      [&](int rank) { return start_worker(rank, rank == withholding_rank ? withhold_step : 0); });
    }

    // The gateway, then start_member(r) for every rank r; connects once it serves.
    void start_gateway(const std::string& mode, const std::vector<std::string>& gateway_flags,
                       const std::function<pid_t(int)>& start_member) {
        mode_ = mode;
        std::vector<std::string> args{
            "serve", "--rank-processes", "--ranks-listen", "127.0.0.1:0",     "--port", "0", "--metrics-port",
            "-1",    "--secret",         kSecret,          "--wait-ranks-ms", "30000"};
        args.insert(args.end(), gateway_flags.begin(), gateway_flags.end());
        for (const std::string& a : group_args(mode)) args.push_back(a);
        spawn_coordinator_process(args);
        std::string line;
        ASSERT_TRUE(read_line(milliseconds(10000), line)) << line;
        const std::string joins_at = "distsample serve: rank processes join at ";
        ASSERT_EQ(line.rfind(joins_at, 0), 0u) << line;
        address_ = line.substr(joins_at.size());
        for (int r = 0; r < kTp; ++r) ranks_.push_back(start_member(r));
        ASSERT_TRUE(read_line(milliseconds(40000), line)) << line << slurp(test_stem() + "_coordinator.log");
        const std::string serving = "distsample serve: tcp 127.0.0.1:";
        ASSERT_EQ(line.rfind(serving, 0), 0u) << line;
        gateway_address_ = "127.0.0.1:" + line.substr(serving.size(), line.find(' ', serving.size()) - serving.size());
        const status s = client::gateway_client::connect(gateway_address_, kSecret, client_);
        ASSERT_TRUE(s.is_ok()) << s.message;
    }

    // Registers the step's requests (unless `register_requests` is false), runs it through the
    // gateway: the kernel's JSON, or {"error": "CODE field: message"}.
    json call_gateway(const json& step, bool register_requests = true) {
        for (size_t b = 0; register_requests && b < step["requests"].size(); ++b) {
            const json& r = step["requests"][b];
            int32_t slot = static_cast<int32_t>(b + 1);
            const std::vector<int32_t> history =
                r.contains("history") ? r["history"].get<std::vector<int32_t>>() : std::vector<int32_t>{};
            if (status s = client_->register_request(wire_params(r), history, slot); !s.is_ok())
                return json{{"error", s.message}};
        }
        const bool verify = step.contains("candidates");
        wire::StepReply reply;
        if (status s = client_->step(wire_step(step), verify, reply); !s.is_ok()) return json{{"error", s.message}};
        last_desync_events_ = reply.desync_events();
        return kernel_json(reply, verify);
    }

    // Retries while the group forms again (each attempt fails fast then).
    json call_gateway_until_ok(const json& step, milliseconds within) {
        const auto deadline = clock_type::now() + within;
        json reply;
        do {
            reply = call_gateway(step);
            if (!reply.contains("error")) break;
            std::this_thread::sleep_for(milliseconds(100));
        } while (clock_type::now() < deadline);
        return reply;
    }

    // The gateway's Health reply: ok, or the message naming what failed.
    wire::HealthReply health() {
        wire::Request request;
        request.mutable_health();
        wire::Reply reply;
        const status s = client_->call(request, reply);
        EXPECT_TRUE(s.is_ok()) << s.message;
        return reply.health();
    }

    // Asks health until its message names `rank`, for at most `within`: the last reply.
    // Member `r` (rank process or worker) stops answering while `step` is in flight, then dies:
    // the step fails with RANK_FAILURE naming it, well before the step timeout.
    void expect_a_killed_member_fails_its_step(const json& step, int r) {
        ASSERT_EQ(::kill(ranks_[static_cast<size_t>(r)], SIGSTOP), 0);
        const auto sent = clock_type::now();
        wire::Request in_flight;
        *in_flight.mutable_verify_step() = wire_step(step);
        uint64_t id = 0;
        ASSERT_TRUE(client_->send(in_flight, id).is_ok());
        std::this_thread::sleep_for(milliseconds(200));
        ASSERT_EQ(::kill(ranks_[static_cast<size_t>(r)], SIGKILL), 0);
        wire::Reply failed;
        ASSERT_TRUE(client_->receive(failed).is_ok());
        const status why = client::gateway_client::status_of(failed);
        const std::string rank = "rank " + std::to_string(r);
        EXPECT_NE(why.message.find("RANK_FAILURE"), std::string::npos) << why.message;
        EXPECT_NE(why.message.find(rank), std::string::npos) << why.message;
        EXPECT_LT(clock_type::now() - sent, kStepTimeout / 2);
    }

    // Member `r` is stopped: `step` fails with TIMEOUT naming it after the step timeout; once
    // continued, the group serves `step` again with the outputs `want`.
    void expect_a_stopped_member_times_out_and_serves_again(const json& step, const json& want, int r) {
        ASSERT_EQ(::kill(ranks_[static_cast<size_t>(r)], SIGSTOP), 0);
        const auto sent = clock_type::now();
        const json hung = call_gateway(step);
        const auto took = clock_type::now() - sent;
        ASSERT_EQ(::kill(ranks_[static_cast<size_t>(r)], SIGCONT), 0);
        ASSERT_TRUE(hung.contains("error")) << hung.dump();
        const std::string error = hung["error"].get<std::string>();
        EXPECT_EQ(error.rfind("TIMEOUT", 0), 0u) << error;
        EXPECT_NE(error.find("rank " + std::to_string(r)), std::string::npos) << error;
        EXPECT_LT(took, kStepTimeout + milliseconds(2000));

        expect_same_outputs(call_gateway_until_ok(step, milliseconds(20000)), want);
    }

    wire::HealthReply health_naming(const std::string& rank, milliseconds within) {
        const auto deadline = clock_type::now() + within;
        wire::HealthReply h;
        do {
            h = health();
            if (!h.ok() && h.message().find(rank) != std::string::npos) break;
            std::this_thread::sleep_for(milliseconds(50));
        } while (clock_type::now() < deadline);
        return h;
    }

    std::string gateway_address_;
    std::unique_ptr<client::gateway_client> client_;
    uint32_t last_desync_events_ = 0;
};

}  // namespace ds::remote_test
