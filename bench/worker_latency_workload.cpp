#include "bench/worker_latency_workload.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "config/choices.h"
#include "core/clock.h"
#include "examples/tp_workers/worker_rows.h"

namespace ds::bench {

group_config make_config(const worker_options& o, bool workers) {
    group_config config;
    config.distribution.tp = kWorkerTp;
    config.limits.vocab_size = o.vocab;
    config.limits.max_batch = o.batch;
    config.limits.max_tokens_per_req = o.n;
    config.limits.max_slots = o.batch + 1;
    config.transport.kind = workers ? transport_kind::ucx : transport_kind::local;
    config.backend = o.backend;
    config.tuning.rank_spin_us = o.rank_spin_us;
    config.tuning.reply_spin_us = o.reply_spin_us;
    config.tuning.scheduler_spin_us = o.scheduler_spin_us;
    const result<dist_mode> mode = parse_mode(o.mode);
    if (!mode.is_ok()) {
        fmt::print(stderr, "{}\n", mode.error().message);
        std::exit(2);
    }
    config.distribution.mode = *mode;
    return config;
}

synthetic_lm make_model(const worker_options& o) {
    synthetic_lm_config lm;
    lm.vocab_size = o.vocab;
    return synthetic_lm(lm);
}

std::vector<sampling_params> request_params(const worker_options& o) {
    std::vector<sampling_params> params;
    for (int32_t b = 0; b < o.batch; ++b) {
        sampling_params p;
        p.temperature = b % 4 == 0 ? 0.0f : 0.8f;
        p.top_p = b % 3 == 0 ? 0.9f : 1.0f;
        p.seed = static_cast<uint64_t>(b + 1);
        params.push_back(p);
    }
    return params;
}

step_request make_step(const worker_options& o) {
    step_request r;
    r.kind = o.n > 1 ? step_kind::verify : step_kind::sample;
    r.tokens_per_req = o.n;
    for (int32_t b = 0; b < o.batch; ++b) {
        r.slots.push_back(b + 1);
        r.positions.push_back(100 + b);
        for (int32_t j = 0; j < o.n && o.n > 1; ++j) r.candidates.push_back((b * 7 + j * 13) % o.vocab);
    }
    return r;
}

status shard_memory::prepare(const worker_options& o, int64_t max_rows, int32_t shard_vocab) {
    if (o.backend != backend_kind::cuda) return status::success();
    return cuda_allocation::allocate(cuda_memory_kind::device,
                                     static_cast<size_t>(max_rows) * static_cast<size_t>(shard_vocab) * sizeof(float),
                                     device_);
}

status shard_memory::place(const float* rows, int64_t count, int32_t vocab, int32_t first, int32_t shard_vocab,
                           logits_view& shard) {
    shard = logits_view{rows + first, logits_dtype::f32, count, shard_vocab, vocab, false};
    if (device_.data() == nullptr) return status::success();
    const size_t row_bytes = static_cast<size_t>(shard_vocab) * sizeof(float);
    DS_TRY(copy_rows(device_.data(), row_bytes, rows + first, static_cast<size_t>(vocab) * sizeof(float), row_bytes,
                     static_cast<size_t>(count)));
    shard = logits_view{device_.data(), logits_dtype::f32, count, shard_vocab, shard_vocab, true};
    return status::success();
}

void run_worker(const worker_options& o, int32_t rank, uint16_t port, int out) {
    worker_rank_config c;
    c.group = make_config(o, true);
    c.topology.logits_source = "worker";
    c.coordinator = fmt::format("127.0.0.1:{}", port);
    c.rank = rank;
    std::unique_ptr<worker_rank> worker;
    if (status s = worker_rank::join(c, worker); !s.is_ok()) {
        fmt::print(stderr, "worker {}: {}\n", rank, s.message);
        ::_exit(1);
    }
    const synthetic_lm model = make_model(o);
    shard_memory memory;
    if (status s = memory.prepare(o, int64_t{o.batch} * o.n, o.vocab / kWorkerTp); !s.is_ok()) {
        fmt::print(stderr, "worker {}: {}\n", rank, s.message);
        ::_exit(1);
    }
    for (;;) {
        worker_step step;
        if (!worker->next_step(std::chrono::milliseconds(500), step).is_ok()) break;  // the group is gone
        if (step.id == 0) continue;
        worker_record record{step.id, steady_now_ns(), 0};
        std::this_thread::sleep_for(std::chrono::microseconds(o.forward_us));
        const std::vector<float> rows =
            example::model_rows(model, step.slots, step.positions, step.candidates, step.tokens_per_req);
        logits_view shard;
        if (!memory
                 .place(rows.data(), int64_t{step.batch_size} * step.tokens_per_req, o.vocab, step.vocab_begin,
                        step.shard_vocab, shard)
                 .is_ok())
            continue;
        record.provided_ns = steady_now_ns();
        step_outputs outputs;
        if (!worker->provide_logits(step.id, shard).is_ok() ||
            !worker->outputs(step.id, std::chrono::seconds(10), outputs).is_ok())
            continue;
        if (::write(out, &record, sizeof record) != static_cast<ssize_t>(sizeof record)) break;
    }
    ::_exit(0);
}

}  // namespace ds::bench
