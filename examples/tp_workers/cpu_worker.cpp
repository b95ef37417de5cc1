// A tensor-parallel model worker with its rank inside (include/distsample/rank.h): it joins the
// coordinator, and for every step makes its vocab shard of the rows with its model (here the
// synthetic one, worker_rows.h; a real worker runs its LM head), hands the shard in and prints the
// tokens the group agreed on, one JSON line per step.
//
//   cpu_worker --coordinator HOST:PORT --rank R [--config FILE] [--set key=value ...]
//              [--model-seed S] [--logits-timeout-ms T] [--withhold-step K] [--shard-memory host|device]
//
// The group's keys (--set tp=4, mode=sharded, ...) are the coordinator's, with
// topology.logits_source=worker. --withhold-step K never hands in the K-th step's logits (1-based),
// to show a worker that fails its step. --shard-memory device copies each shard into GPU memory
// and hands in the device pointer, as a worker whose LM head runs on the GPU does (with
// backend = cuda its rank samples it where it lies).
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <distsample/rank.h>

#include "config/config_file.h"
#include "examples/tp_workers/worker_rows.h"
#include "kernels/device_memory.h"

namespace {

struct worker_options {
    std::string config_file;
    std::vector<std::string> overrides;
    std::string coordinator;
    int32_t rank = 0;
    uint64_t model_seed = 1;
    int64_t logits_timeout_ms = 1000;
    int64_t withhold_step = 0;
    bool device_shard = false;
};

bool parse(int argc, char** argv, worker_options& o) {
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const char* value = argv[i + 1];
        if (flag == "--config") {
            o.config_file = value;
        } else if (flag == "--set") {
            o.overrides.emplace_back(value);
        } else if (flag == "--coordinator") {
            o.coordinator = value;
        } else if (flag == "--rank") {
            o.rank = std::atoi(value);
        } else if (flag == "--model-seed") {
            o.model_seed = std::strtoull(value, nullptr, 10);
        } else if (flag == "--logits-timeout-ms") {
            o.logits_timeout_ms = std::atoll(value);
        } else if (flag == "--withhold-step") {
            o.withhold_step = std::atoll(value);
        } else if (flag == "--shard-memory" && (std::strcmp(value, "host") == 0 || std::strcmp(value, "device") == 0)) {
            o.device_shard = std::strcmp(value, "device") == 0;
        } else {
            return false;
        }
    }
    return argc % 2 == 1 && !o.coordinator.empty();
}

ds::status load(const worker_options& o, ds::worker_rank_config& c) {
    DS_TRY(ds::load_group_config(o.config_file, o.overrides, c.group));
    DS_TRY(ds::load_topology_config(o.config_file, o.overrides, c.topology));
    c.coordinator = o.coordinator;
    c.rank = o.rank;
    c.logits_timeout = std::chrono::milliseconds(o.logits_timeout_ms);
    return c.check();
}

// The shard of `full` (rows of `vocab` floats) that begins at token `first`: a strided view of the
// host rows (no copy), or, with `device` allocated, a copy in GPU memory.
ds::status place_shard(const std::vector<float>& full, int64_t rows, int32_t vocab, int32_t first, int32_t shard_vocab,
                       ds::cuda_allocation& device, ds::logits_view& shard) {
    shard = ds::logits_view{full.data() + first, ds::logits_dtype::f32, rows, shard_vocab, vocab, false};
    if (device.data() == nullptr) return ds::status::success();
    const size_t row_bytes = static_cast<size_t>(shard_vocab) * sizeof(float);
    DS_TRY(ds::copy_rows(device.data(), row_bytes, full.data() + first, static_cast<size_t>(vocab) * sizeof(float),
                         row_bytes, static_cast<size_t>(rows)));
    shard = ds::logits_view{device.data(), ds::logits_dtype::f32, rows, shard_vocab, shard_vocab, true};
    return ds::status::success();
}

// One step: the shard of the model's rows, handed in; the agreed tokens printed.
void serve_step(ds::worker_rank& rank, const ds::synthetic_lm& model, ds::cuda_allocation& device,
                const ds::worker_step& step) {
    const std::vector<float> full =
        ds::example::model_rows(model, step.slots, step.positions, step.candidates, step.tokens_per_req);
    const int64_t rows = int64_t{step.batch_size} * step.tokens_per_req;
    ds::logits_view shard;
    ds::status placed = place_shard(full, rows, model.vocab_size(), step.vocab_begin, step.shard_vocab, device, shard);
    if (!placed.is_ok()) {
        fmt::print("{{\"step\": {}, \"error\": \"{}\"}}\n", step.id, placed.message);
        return;
    }
    if (ds::status s = rank.provide_logits(step.id, shard); !s.is_ok()) {
        fmt::print("{{\"step\": {}, \"error\": \"{}\"}}\n", step.id, s.message);
        return;
    }
    ds::step_outputs out;
    const ds::status s = rank.outputs(step.id, std::chrono::seconds(30), out);
    if (!s.is_ok()) {
        fmt::print("{{\"step\": {}, \"error\": \"{}\"}}\n", step.id, s.message);
        return;
    }
    const auto bs = static_cast<size_t>(step.batch_size);
    const std::vector<int32_t> accept_length(out.packed.end() - static_cast<std::ptrdiff_t>(out.batch_size()),
                                             out.packed.end());
    fmt::print(
        "{{\"step\": {}, \"tokens\": [{}], \"accept_length\": [{}]}}\n", step.id,
        fmt::join(out.packed.begin(), out.packed.begin() + static_cast<std::ptrdiff_t>(bs * step.tokens_per_req), ", "),
        fmt::join(accept_length.begin(), accept_length.begin() + static_cast<std::ptrdiff_t>(bs), ", "));
}

}  // namespace

int main(int argc, char** argv) {
    worker_options o;
    if (!parse(argc, argv, o)) {
        std::cerr << "usage: cpu_worker --coordinator HOST:PORT --rank R [--config FILE] [--set key=value ...] "
                     "[--model-seed S] [--logits-timeout-ms T] [--withhold-step K] [--shard-memory host|device]\n";
        return 2;
    }
    ds::worker_rank_config c;
    if (ds::status s = load(o, c); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return 2;
    }
    ds::synthetic_lm_config lm;
    lm.vocab_size = c.group.limits.vocab_size;
    lm.seed = o.model_seed;
    const ds::synthetic_lm model(lm);
    ds::cuda_allocation device;  // where the shards go with --shard-memory device
    if (o.device_shard) {
        const auto bytes = static_cast<size_t>(c.group.max_pad_bs()) *
                           static_cast<size_t>(c.group.limits.max_tokens_per_req) *
                           static_cast<size_t>(c.group.limits.vocab_size / c.group.distribution.tp) * sizeof(float);
        if (ds::status s = ds::cuda_allocation::allocate(ds::cuda_memory_kind::device, bytes, device); !s.is_ok()) {
            std::cerr << "error: --shard-memory device: " << s.message << '\n';
            return 1;
        }
    }
    std::unique_ptr<ds::worker_rank> rank;
    if (ds::status s = ds::worker_rank::join(c, rank); !s.is_ok()) {
        std::cerr << "error: " << s.message << '\n';
        return 1;
    }
    std::cerr << fmt::format("worker {}: joined {}\n", c.rank, c.coordinator);
    for (int64_t seen = 1;; ++seen) {
        ds::worker_step step;
        ds::status s = rank->next_step(std::chrono::seconds(1), step);
        for (; s.code == ds::status_code::timeout; s = rank->next_step(std::chrono::seconds(1), step)) {
        }
        if (!s.is_ok()) {
            std::cerr << fmt::format("worker {}: {}\n", c.rank, s.message);
            return 0;
        }
        if (seen != o.withhold_step) serve_step(*rank, model, device, step);
        std::fflush(stdout);
    }
}
