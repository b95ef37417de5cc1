// `distsample coordinator` and `distsample rank`: a coordinator whose ranks are other processes
// (group::create_with_rank_processes, actors/rank_process.h). The coordinator takes steps on stdin, one JSON
// document per line: the input of `distsample kernel` plus "op": "sample" or "verify" (or just
// {"op": "health"}); it answers each with one line on stdout, the JSON of `distsample kernel`, or
// {"error": "..."}. Request b is registered into slot b + 1 first, unless "register": false.
// {"op": "faults"} answers with the fault report of the steps so far under the configured plan
// (actors/fault_report.h, the JSON `distsample faults report` reads). Its first line is
// {"listening": "HOST:PORT"}; with --wait-ranks-ms it then waits (bounded) until every rank process
// has joined and the group has formed, and says so in a second line, {"ready": {"tp": TP}}. It
// stops at the end of stdin.
// Both take where they run and meet from the config's "topology" section (config/topology_config.h);
// --listen, --coordinator and --rank override it.
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>
#include <caf/io/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <distsample/group.h>

#include "actors/fault_report.h"
#include "actors/rank_process.h"
#include "actors/remote_ranks.h"
#include "cli/commands.h"
#include "cli/step_json.h"
#include "config/capacity.h"
#include "config/config_file.h"
#include "config/json_input.h"
#include "sources/model_factory.h"
#include "transport/tcp_bootstrap.h"

namespace ds::cli {

namespace {

// The configuration of a rank process (and of the coordinator, which checks it for them): one
// rank's buffers must fit this host's memory budget.
group_config load_config(const group_options& options) {
    group_config config;
    throw_unless_ok(load_group_config(options.config_file, options.overrides, config));
    throw_unless_ok(validate_group_config(config));
    throw_unless_ok(check_memory_budget(config, 1));
    return config;
}

topology_config load_topology(const group_options& options, int32_t tp) {
    topology_config topology;
    throw_unless_ok(load_topology_config(options.config_file, options.overrides, topology));
    throw_unless_ok(validate_topology_config(topology, tp));
    return topology;
}

// This host's names for itself: its interfaces' addresses and its host name.
std::vector<std::string> local_names() {
    std::vector<std::string> names;
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
        for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
            if (a->ifa_addr == nullptr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6))
                continue;
            char text[NI_MAXHOST];
            const socklen_t size = a->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
            if (::getnameinfo(a->ifa_addr, size, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
                names.emplace_back(text);
        }
        ::freeifaddrs(list);
    }
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) names.emplace_back(host);
    return names;
}

// --rank, else the one rank whose topology.hosts entry names this host.
int32_t rank_of_this_host(const rank_options& options, const topology_config& topology, int32_t tp) {
    if (options.rank >= 0) {
        if (options.rank >= tp)
            throw input_error(fmt::format("--rank {}: expected a rank in [0, {})", options.rank, tp));
        return options.rank;
    }
    if (options.rank != -1) throw input_error(fmt::format("--rank {}: expected a rank in [0, {})", options.rank, tp));
    if (topology.hosts.empty())
        throw input_error("--rank is not given and topology.hosts is empty: expected one or the other");
    const std::vector<std::string> names = local_names();
    std::vector<int32_t> here;
    for (int32_t r = 0; r < tp; ++r) {
        if (std::find(names.begin(), names.end(), topology.hosts[static_cast<size_t>(r)]) != names.end())
            here.push_back(r);
    }
    if (here.size() != 1) {
        throw input_error(
            fmt::format("--rank is not given and {} entries of topology.hosts name this host: expected exactly one "
                        "(give --rank when a host runs several ranks)",
                        here.size()));
    }
    return here.front();
}

// What the topology says about a rank process's libraries, set before they start.
void set_rank_environment(const topology_config& topology, int32_t rank) {
    set_ucx_environment(topology);
    if (!topology.devices.empty())
        ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(topology.devices[static_cast<size_t>(rank)]).c_str(), 1);
}

host_port parse_address(const std::string& text, const char* flag) {
    result<host_port> address = parse_host_port(text);
    if (!address.is_ok()) throw input_error(fmt::format("{} {}: {}", flag, text, address.error().message));
    return *address;
}

// The coordinator's side of the lines: the group, and what became of the plan's faults.
struct coordinator_session {
    group& ranks;
    kernel_config request_limits;  // what check_requests holds a line's requests to
    fault_ledger ledger;
    uint64_t next_step_id = 1;  // every step submitted takes the group's next id; a reply says its own
};

// Records a submitted step's outcome in the ledger, as the gateway does (gateway/fault_requests.h).
void record_faults(coordinator_session& session, const step_reply& reply, std::chrono::steady_clock::time_point sent) {
    const uint64_t step_id = reply.result.is_ok() ? reply.step_id : session.next_step_id;
    session.next_step_id = step_id + 1;
    if (session.ledger.plan().empty()) return;
    const auto latency = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - sent);
    session.ledger.record(step_id, reply, latency.count());
}

// One input line -> one output document.
nlohmann::json serve_line(coordinator_session& session, const std::string& line) {
    group& ranks = session.ranks;
    const group_config& config = ranks.config();
    result<nlohmann::json> parsed = parse_json(line);
    if (!parsed.is_ok())
        throw input_error(fmt::format("expected one JSON object per line ({})", parsed.error().message));
    nlohmann::json doc = std::move(parsed).value();
    if (!doc.is_object()) throw input_error("expected one JSON object per line");
    const auto op_field = doc.find("op");
    if (op_field == doc.end() || !op_field->is_string()) {
        throw input_error(fmt::format("op: expected one of sample, verify, health or faults, got {}",
                                      op_field == doc.end() ? "none" : quote_json(*op_field)));
    }
    const std::string op = op_field->get<std::string>();
    if (op == "health") {
        throw_unless_ok(ranks.health());
        return {{"health", "ok"}};
    }
    if (op == "faults") return nlohmann::json::parse(session.ledger.json(true));
    if (op != "sample" && op != "verify")
        throw input_error(fmt::format("op = {}: expected sample, verify, health or faults", quote_json(*op_field)));
    const step_kind kind = op == "verify" ? step_kind::verify : step_kind::sample;
    // "register": false reuses the slots an earlier line registered (keeping their penalty counts).
    const auto register_field = doc.find("register");
    if (register_field != doc.end() && !register_field->is_boolean())
        throw input_error(fmt::format("register: expected true or false, got {}", quote_json(*register_field)));
    const bool register_requests = register_field == doc.end() || register_field->get<bool>();
    doc.erase("op");
    doc.erase("register");
    const json_step step = parse_step(doc, kind, !ranks.ranks_make_logits());
    if (step.vocab_size != config.limits.vocab_size) {
        throw input_error(fmt::format("vocab_size = {}: the coordinator has vocab_size = {}", step.vocab_size,
                                      config.limits.vocab_size));
    }
    // Checked here, so that an error names the request rather than the rank that refused it.
    if (step.batch_size() > config.limits.max_batch || step.batch_size() >= config.limits.max_slots) {
        throw input_error(fmt::format("requests: {} requests: expected at most max_batch = {} (and max_slots - 1 = {})",
                                      step.batch_size(), config.limits.max_batch, config.limits.max_slots - 1));
    }
    throw_unless_ok(check_requests(step, session.request_limits));
    for (int32_t b = 0; register_requests && b < step.batch_size(); ++b) {
        const json_request& r = step.requests[static_cast<size_t>(b)];
        throw_unless_ok(ranks.register_request(b + 1, r.params, r.history));
    }
    step_request request = step.request;
    if (!ranks.ranks_make_logits()) request.shards = split_vocab(step.as_input().logits, config.distribution.tp);
    const auto sent = std::chrono::steady_clock::now();
    step_reply reply = ranks.step(std::move(request));
    record_faults(session, reply, sent);
    throw_unless_ok(reply.result);
    step_result result(step.batch_size(), step.request.tokens_per_req);
    result.packed = std::move(reply.outputs.packed);
    result.accept_index = std::move(reply.outputs.accept_index);
    result.logprobs = std::move(reply.outputs.logprobs);
    result.row_error = std::move(reply.outputs.row_error);
    return result_to_json(result, kind, step.batch_size(), step.request.tokens_per_req);
}

// The ranks' limits on one request's parameters.
kernel_config request_limits_of(const group_config& config) {
    kernel_config limits;
    limits.vocab_size = config.limits.vocab_size;
    limits.max_logit_bias = config.limits.max_logit_bias;
    limits.max_penalty_tokens = config.limits.max_penalty_tokens;
    return limits;
}

}  // namespace

int run_coordinator_command(const coordinator_options& options) {
    return run_json_command([&] {
        const group_config config = load_config(options.group);
        const topology_config topology = load_topology(options.group, config.distribution.tp);
        const auto [host, port] = options.listen.empty() ? parse_address(topology.coordinator, "topology.coordinator =")
                                                         : parse_address(options.listen, "--listen");
        std::unique_ptr<group> ranks;
        throw_unless_ok(group::create_with_rank_processes(config, topology, host, port, ranks));
        std::cout << nlohmann::json{{"listening", fmt::format("{}:{}", host, ranks->rank_port())}}.dump() << std::endl;
        coordinator_session session{*ranks, request_limits_of(config),
                                    fault_ledger(config.faults, config.distribution.policy)};
        if (options.wait_ranks_ms > 0) {
            if (status s = ranks->wait_for_ranks(std::chrono::milliseconds(options.wait_ranks_ms)); !s.is_ok())
                throw std::runtime_error(fmt::format("--wait-ranks-ms {}: {}", options.wait_ranks_ms, s.message));
            std::cout << nlohmann::json{{"ready", {{"tp", config.distribution.tp}}}}.dump() << std::endl;
        }
        for (std::string line; std::getline(std::cin, line);) {
            if (line.empty()) continue;
            nlohmann::json out;
            try {
                out = serve_line(session, line);
            } catch (const std::exception& e) {
                out = {{"error", e.what()}};
            }
            std::cout << out.dump() << std::endl;
        }
        return 0;
    });
}

int run_rank_command(const rank_options& options) {
    return run_json_command([&]() -> int {
        const group_config config = load_config(options.group);
        const topology_config topology = load_topology(options.group, config.distribution.tp);
        const auto [host, port] = options.coordinator.empty()
                                      ? parse_address(topology.coordinator, "topology.coordinator =")
                                      : parse_address(options.coordinator, "--coordinator");
        const int32_t rank = rank_of_this_host(options, topology, config.distribution.tp);
        set_rank_environment(topology, rank);
        if (topology.logits_source == "worker") {
            throw input_error(
                "topology.logits_source = worker: the ranks live inside model workers (the rank API, "
                "include/distsample/rank.h): expected wire, synthetic or ngram for `distsample rank`");
        }
        std::unique_ptr<logits_source> source;  // null: "wire"
        if (status s = make_logits_source(topology.logits_source, config.limits.vocab_size, topology.model_seed,
                                          topology.corpus, source);
            !s.is_ok()) {
            throw input_error(fmt::format("topology.corpus = '{}': {}", topology.corpus, s.message));
        }
        if (source && source->vocab_size() != config.limits.vocab_size) {
            throw input_error(fmt::format("vocab_size = {}: topology.logits_source = {} has a vocabulary of {}",
                                          config.limits.vocab_size, topology.logits_source, source->vocab_size()));
        }
        // Never destroyed: the process ends right after (see run_rank_process).
        auto* cfg = new caf::actor_system_config;
        auto* system = new caf::actor_system{configure_remote_actor_system(*cfg, topology)};
        rank_process_options process;
        if (source) process.supplier = make_model_supplier(*source, rank, config.limits.max_slots);
        const status s = run_rank_process(*system, config, rank, host, port, topology, std::move(process));
        if (!s.is_ok()) std::cerr << "error: " << s.message << std::endl;
        std::fflush(nullptr);
        std::_Exit(s.is_ok() ? 0 : (s.code == status_code::invalid_argument ? 2 : 1));
    });
}

}  // namespace ds::cli
