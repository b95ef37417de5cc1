// The device side of exact sharded sampling: shard_rows.h. Each query packs its inputs into one
// host-to-device copy, runs one kernel of shard_row_kernels.cuh with one block per row it names,
// and copies its per-row answers back in one copy, all on the rows' own stream through pinned
// memory. Queries are synchronous: the sampler needs each answer before its next collective; they
// wait for their stream only, so ranks sharing a GPU do not wait for each other's work.
#include "kernels/cuda/shard_rows.h"

#include <cuda_runtime.h>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/shard_row_kernels.cuh"

namespace ds::cuda {

namespace {

unsigned grid_of(size_t blocks) { return static_cast<unsigned>(blocks); }
size_t aligned(size_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

// Device memory: the rows, and two areas reused by every query, one for its inputs (packed on the
// host, copied in one piece) and one for its outputs.
struct shard_rows::buffers {
    int64_t max_rows = 0;
    int32_t shard_vocab = 0;
    int32_t mask_words = 0;
    device_buffer logits, masses, staged_logits;
    device_buffer sort_in, sort_out, sort_temp;  // cut rows' masses, sorted (allocated on first use)
    device_buffer inputs, outputs;
    std::vector<unsigned char> packed;  // the next query's inputs
    pinned_buffer inputs_landing, outputs_landing;
    cuda_stream stream;

    row_buffers rows() const {
        return {static_cast<float*>(logits.get()), static_cast<uint64_t*>(masses.get()), shard_vocab};
    }

    // Appends `count` elements to the packed inputs; returns their offset.
    template <class T>
    size_t pack(const T* data, size_t count) {
        const size_t at = (packed.size() + 15) / 16 * 16;
        packed.resize(at + count * sizeof(T));
        if (count > 0) std::memcpy(packed.data() + at, data, count * sizeof(T));
        return at;
    }
    template <class T>
    size_t pack(const std::vector<T>& v) {
        return pack(v.data(), v.size());
    }
    // Appends the first `count` elements of a request's list, made contiguous.
    template <class T>
    size_t pack_list(strided<T> list, int32_t count) {
        std::vector<T> flat(static_cast<size_t>(count));
        for (int32_t k = 0; k < count; ++k) flat[static_cast<size_t>(k)] = list[k];
        return pack(flat);
    }
    // Copies the packed inputs to the device (growing the area) and clears them.
    status send_inputs() {
        if (packed.size() > inputs.bytes()) {
            inputs = device_buffer{};
            DS_TRY(inputs.allocate(packed.size() * 2));
        }
        if (!packed.empty()) {
            DS_TRY(grow(inputs_landing, packed.size()));
            std::memcpy(inputs_landing.get(), packed.data(), packed.size());
            CUDA_TRY(cudaMemcpyAsync(inputs.get(), inputs_landing.get(), packed.size(), cudaMemcpyHostToDevice,
                                     stream.get()));
        }
        packed.clear();
        return status::success();
    }
    template <class T>
    T* input_at(size_t offset) const {
        return reinterpret_cast<T*>(static_cast<unsigned char*>(inputs.get()) + offset);
    }
    // At least `bytes` of output area.
    status reserve_outputs(size_t bytes) {
        if (bytes <= outputs.bytes()) return status::success();
        outputs = device_buffer{};
        return outputs.allocate(std::max(bytes, outputs.bytes() * 2));
    }
    template <class T>
    T* output_at(size_t offset) const {
        return reinterpret_cast<T*>(static_cast<unsigned char*>(outputs.get()) + offset);
    }
    // Copies the first `bytes` of the query's outputs to the host once its kernels are done;
    // take() then hands them out.
    status fetch(size_t bytes) {
        CUDA_TRY(cudaGetLastError());
        if (bytes > 0) {
            DS_TRY(grow(outputs_landing, bytes));
            CUDA_TRY(
                cudaMemcpyAsync(outputs_landing.get(), outputs.get(), bytes, cudaMemcpyDeviceToHost, stream.get()));
        }
        CUDA_TRY(cudaStreamSynchronize(stream.get()));
        return status::success();
    }
    // `bytes` of the fetched outputs from `offset` into `host`.
    void take(size_t offset, void* host, size_t bytes) const {
        if (bytes > 0) std::memcpy(host, static_cast<const unsigned char*>(outputs_landing.get()) + offset, bytes);
    }

   private:
    static status grow(pinned_buffer& buffer, size_t bytes) {
        if (bytes <= buffer.bytes()) return status::success();
        buffer = pinned_buffer{};
        return buffer.allocate(bytes * 2);
    }
};

shard_rows::shard_rows(std::unique_ptr<buffers> b) : b_(std::move(b)) {}
shard_rows::~shard_rows() = default;

status shard_rows::create(int64_t max_rows, int32_t shard_vocab, int32_t vocab, std::unique_ptr<shard_rows>& out) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        cudaGetLastError();
        return {status_code::unsupported, "backend = 'cuda': no CUDA device is available; use --backend cpu"};
    }
    auto b = std::make_unique<buffers>();
    b->max_rows = max_rows;
    b->shard_vocab = shard_vocab;
    b->mask_words = (vocab + 31) / 32;
    const auto tokens = static_cast<size_t>(max_rows) * static_cast<size_t>(shard_vocab);
    DS_TRY(b->logits.allocate(tokens * sizeof(float)));
    DS_TRY(b->masses.allocate(tokens * sizeof(uint64_t)));
    DS_TRY(b->stream.create());
    out.reset(new shard_rows(std::move(b)));
    return status::success();
}

status shard_rows::prepare(const step_input& in, const param_pool& pool, int32_t vocab_offset, float* best_logit,
                           int32_t* best_index) {
    buffers& b = *b_;
    const int64_t rows = int64_t{in.batch_size} * in.tokens_per_req;
    if (rows > b.max_rows || in.logits.vocab != b.shard_vocab)
        return {status_code::internal, "shard_rows: a step larger than its buffers"};
    if (rows == 0) return status::success();
    const void* logits = in.logits.data;
    int64_t row_stride = in.logits.row_stride;
    if (!in.logits.on_device) {  // rows from the host: copied in once, packed
        const size_t row_bytes = static_cast<size_t>(b.shard_vocab) * dtype_size(in.logits.dtype);
        if (b.staged_logits.get() == nullptr)
            DS_TRY(b.staged_logits.allocate(static_cast<size_t>(b.max_rows) * static_cast<size_t>(b.shard_vocab) *
                                            sizeof(float)));
        CUDA_TRY(cudaMemcpy2DAsync(b.staged_logits.get(), row_bytes, logits,
                                   in.logits.row_stride * dtype_size(in.logits.dtype), row_bytes,
                                   static_cast<size_t>(rows), cudaMemcpyHostToDevice, b.stream.get()));
        logits = b.staged_logits.get();
        row_stride = b.shard_vocab;
    }
    // The requests with their lists, the candidates and the bitmask, in one copy; the views'
    // list pointers are set once the inputs' device address is known.
    struct {
        std::vector<request_view> views;
        std::vector<size_t> seen_tokens, seen_counts, bias_tokens, bias_values;
    } r;
    for (int32_t i = 0; i < in.batch_size; ++i) {
        const request_view v = pool.request(in.slots[i], in.positions[i]);
        r.views.push_back(v);
        r.seen_tokens.push_back(b.pack_list(v.seen_tokens, v.seen_count));
        r.seen_counts.push_back(b.pack_list(v.seen_counts, v.seen_count));
        r.bias_tokens.push_back(b.pack_list(v.bias_tokens, v.bias_count));
        r.bias_values.push_back(b.pack_list(v.bias_values, v.bias_count));
    }
    const size_t views_at = b.pack(r.views);
    const size_t candidates_at = in.candidates != nullptr ? b.pack(in.candidates, static_cast<size_t>(rows)) : 0;
    const size_t mask_at =
        in.bitmask != nullptr ? b.pack(in.bitmask, static_cast<size_t>(rows) * static_cast<size_t>(b.mask_words)) : 0;
    auto* views = reinterpret_cast<request_view*>(b.packed.data() + views_at);
    const size_t packed_bytes = b.packed.size();
    if (packed_bytes > b.inputs.bytes()) {  // the device address is needed before the copy
        b.inputs = device_buffer{};
        DS_TRY(b.inputs.allocate(packed_bytes * 2));
    }
    auto* base = static_cast<unsigned char*>(b.inputs.get());
    for (size_t i = 0; i < r.views.size(); ++i) {
        views[i].seen_tokens = {reinterpret_cast<const int32_t*>(base + r.seen_tokens[i]), 1};
        views[i].seen_counts = {reinterpret_cast<const int32_t*>(base + r.seen_counts[i]), 1};
        views[i].bias_tokens = {reinterpret_cast<const int32_t*>(base + r.bias_tokens[i]), 1};
        views[i].bias_values = {reinterpret_cast<const float*>(base + r.bias_values[i]), 1};
    }
    DS_TRY(b.send_inputs());
    DS_TRY(b.reserve_outputs(static_cast<size_t>(rows) * 2 * sizeof(float)));
    prepare_args a{logits,
                   in.logits.dtype,
                   row_stride,
                   b.input_at<request_view>(views_at),
                   in.candidates != nullptr ? b.input_at<int32_t>(candidates_at) : nullptr,
                   in.bitmask != nullptr ? b.input_at<uint32_t>(mask_at) : nullptr,
                   b.mask_words,
                   in.tokens_per_req,
                   vocab_offset,
                   b.output_at<float>(0),
                   b.output_at<int32_t>(static_cast<size_t>(rows) * sizeof(float))};
    prepare_kernel<<<grid_of(static_cast<size_t>(rows)), kBlockThreads, 0, b.stream.get()>>>(b.rows(), a);
    const size_t logits_bytes = static_cast<size_t>(rows) * sizeof(float);
    DS_TRY(b.fetch(2 * logits_bytes));
    b.take(0, best_logit, logits_bytes);
    b.take(logits_bytes, best_index, static_cast<size_t>(rows) * sizeof(int32_t));
    return status::success();
}

status shard_rows::masses(const std::vector<float>& max_logit, const std::vector<uint8_t>& has_max,
                          const std::vector<size_t>& stochastic_rows, const std::vector<float>& temperatures,
                          uint64_t* unit_sums, uint64_t* counts_and_masses) {
    buffers& b = *b_;
    const size_t rows = max_logit.size();
    if (rows == 0) return status::success();
    std::vector<int32_t> stochastic_of(rows, -1);
    for (size_t k = 0; k < stochastic_rows.size(); ++k) stochastic_of[stochastic_rows[k]] = static_cast<int32_t>(k);
    const size_t max_at = b.pack(max_logit);
    const size_t has_at = b.pack(has_max);
    const size_t of_at = b.pack(stochastic_of);
    const size_t temperatures_at = b.pack(temperatures);
    DS_TRY(b.send_inputs());
    const size_t sums_bytes = aligned(rows * sizeof(uint64_t));
    const size_t totals_bytes = 2 * stochastic_rows.size() * sizeof(uint64_t);
    DS_TRY(b.reserve_outputs(sums_bytes + totals_bytes));
    const mass_args a{b.input_at<float>(max_at),  b.input_at<uint8_t>(has_at),
                      b.input_at<int32_t>(of_at), b.input_at<float>(temperatures_at),
                      b.output_at<uint64_t>(0),   b.output_at<uint64_t>(sums_bytes)};
    mass_kernel<<<grid_of(rows), kBlockThreads, 0, b.stream.get()>>>(b.rows(), a);
    DS_TRY(b.fetch(sums_bytes + totals_bytes));
    b.take(0, unit_sums, rows * sizeof(uint64_t));
    b.take(sums_bytes, counts_and_masses, totals_bytes);
    return status::success();
}

status shard_rows::largest_masses(const std::vector<size_t>& rows, const std::vector<uint64_t>& depths, uint64_t* out) {
    buffers& b = *b_;
    if (rows.empty() || depths.empty()) return status::success();
    const auto width = static_cast<size_t>(b.shard_vocab);
    const size_t max_items = static_cast<size_t>(b.max_rows) * width;
    if (b.sort_in.get() == nullptr) {
        DS_TRY(b.sort_in.allocate(max_items * sizeof(uint64_t)));
        DS_TRY(b.sort_out.allocate(max_items * sizeof(uint64_t)));
        std::vector<int64_t> all_offsets(static_cast<size_t>(b.max_rows) + 1, 0);
        size_t temp_bytes = 0;
        CUDA_TRY(cub::DeviceSegmentedRadixSort::SortKeysDescending(
            nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
            static_cast<int64_t>(max_items), static_cast<int64_t>(b.max_rows), all_offsets.data(),
            all_offsets.data() + 1, 0, exact::kMassBits + 1));
        DS_TRY(b.sort_temp.allocate(temp_bytes));
    }
    std::vector<int64_t> row_ids(rows.begin(), rows.end());
    std::vector<int64_t> offsets(rows.size() + 1);
    for (size_t i = 0; i <= rows.size(); ++i) offsets[i] = static_cast<int64_t>(i * width);
    const size_t ids_at = b.pack(row_ids);
    const size_t offsets_at = b.pack(offsets);
    const size_t depths_at = b.pack(depths);
    DS_TRY(b.send_inputs());
    const size_t out_bytes = rows.size() * depths.size() * 2 * sizeof(uint64_t);
    DS_TRY(b.reserve_outputs(out_bytes));
    auto* sort_in = static_cast<uint64_t*>(b.sort_in.get());
    auto* sort_out = static_cast<uint64_t*>(b.sort_out.get());
    copy_rows_kernel<<<grid_of(rows.size()), kBlockThreads, 0, b.stream.get()>>>(
        static_cast<const uint64_t*>(b.masses.get()), b.input_at<int64_t>(ids_at), b.shard_vocab, sort_in);
    size_t temp_bytes = b.sort_temp.bytes();
    const int64_t* segment_offsets = b.input_at<int64_t>(offsets_at);
    CUDA_TRY(cub::DeviceSegmentedRadixSort::SortKeysDescending(
        b.sort_temp.get(), temp_bytes, sort_in, sort_out, static_cast<int64_t>(rows.size() * width),
        static_cast<int64_t>(rows.size()), segment_offsets, segment_offsets + 1, 0, exact::kMassBits + 1,
        b.stream.get()));
    level_kernel<<<grid_of(rows.size()), kBlockThreads, 0, b.stream.get()>>>(
        sort_out, b.shard_vocab, b.input_at<uint64_t>(depths_at), static_cast<int32_t>(depths.size()),
        b.output_at<uint64_t>(0));
    DS_TRY(b.fetch(out_bytes));
    b.take(0, out, out_bytes);
    return status::success();
}

status shard_rows::candidates(const std::vector<candidate_request>& requests, uint64_t* masses, int32_t* tokens,
                              uint64_t* counts) {
    buffers& b = *b_;
    if (requests.empty()) return status::success();
    std::vector<candidate_task> tasks;
    uint64_t room = 0;
    for (const candidate_request& r : requests) {
        tasks.push_back({static_cast<int64_t>(r.row), r.threshold, r.room, room});
        room += r.room;
    }
    const size_t tasks_at = b.pack(tasks);
    DS_TRY(b.send_inputs());
    const size_t masses_bytes = aligned(room * sizeof(uint64_t));
    const size_t tokens_bytes = aligned(room * sizeof(int32_t));
    DS_TRY(b.reserve_outputs(masses_bytes + tokens_bytes + requests.size() * sizeof(uint64_t)));
    candidate_kernel<<<grid_of(requests.size()), kBlockThreads, 0, b.stream.get()>>>(
        b.rows(), b.input_at<candidate_task>(tasks_at), b.output_at<uint64_t>(0), b.output_at<int32_t>(masses_bytes),
        b.output_at<uint64_t>(masses_bytes + tokens_bytes));
    DS_TRY(b.fetch(masses_bytes + tokens_bytes + requests.size() * sizeof(uint64_t)));
    b.take(0, masses, room * sizeof(uint64_t));
    b.take(masses_bytes, tokens, room * sizeof(int32_t));
    b.take(masses_bytes + tokens_bytes, counts, requests.size() * sizeof(uint64_t));
    return status::success();
}

status shard_rows::cut_histograms(const std::vector<size_t>& rows, const std::vector<exact::filter_cut>& domains,
                                  const std::vector<uint64_t>& prefixes, int shift, uint64_t* histograms) {
    buffers& b = *b_;
    if (rows.empty()) return status::success();
    const std::vector<int64_t> row_ids(rows.begin(), rows.end());
    const size_t ids_at = b.pack(row_ids);
    const size_t domains_at = b.pack(domains);
    const size_t prefixes_at = b.pack(prefixes);
    DS_TRY(b.send_inputs());
    const size_t bytes = rows.size() * 2 * kDigitBins * sizeof(uint64_t);
    DS_TRY(b.reserve_outputs(bytes));
    histogram_kernel<<<grid_of(rows.size()), kBlockThreads, 0, b.stream.get()>>>(
        b.rows(), b.input_at<int64_t>(ids_at), b.input_at<exact::filter_cut>(domains_at),
        b.input_at<uint64_t>(prefixes_at), shift, b.output_at<uint64_t>(0));
    DS_TRY(b.fetch(bytes));
    b.take(0, histograms, bytes);
    return status::success();
}

status shard_rows::ties_at_mass(const std::vector<tie_query>& queries, int64_t* counts, int32_t* tokens) {
    buffers& b = *b_;
    if (queries.empty()) return status::success();
    const size_t queries_at = b.pack(queries);
    DS_TRY(b.send_inputs());
    const size_t counts_bytes = aligned(queries.size() * sizeof(int64_t));
    DS_TRY(b.reserve_outputs(counts_bytes + queries.size() * sizeof(int32_t)));
    tie_kernel<<<grid_of(queries.size()), kBlockThreads, 0, b.stream.get()>>>(
        b.rows(), b.input_at<tie_query>(queries_at), b.output_at<int64_t>(0), b.output_at<int32_t>(counts_bytes));
    DS_TRY(b.fetch(counts_bytes + queries.size() * sizeof(int32_t)));
    b.take(0, counts, queries.size() * sizeof(int64_t));
    b.take(counts_bytes, tokens, queries.size() * sizeof(int32_t));
    return status::success();
}

status shard_rows::kept_masses(const std::vector<kept_request>& requests, uint64_t* kept) {
    buffers& b = *b_;
    if (requests.empty()) return status::success();
    const size_t requests_at = b.pack(requests);
    DS_TRY(b.send_inputs());
    const size_t bytes = 2 * requests.size() * sizeof(uint64_t);
    DS_TRY(b.reserve_outputs(bytes));
    kept_kernel<<<grid_of(requests.size()), kBlockThreads, 0, b.stream.get()>>>(
        b.rows(), b.input_at<kept_request>(requests_at), b.output_at<uint64_t>(0));
    DS_TRY(b.fetch(bytes));
    b.take(0, kept, bytes);
    return status::success();
}

status shard_rows::tokens_at_mass(const std::vector<mass_draw>& draws, int32_t* tokens) {
    buffers& b = *b_;
    if (draws.empty()) return status::success();
    const size_t draws_at = b.pack(draws);
    DS_TRY(b.send_inputs());
    DS_TRY(b.reserve_outputs(draws.size() * sizeof(int32_t)));
    draw_kernel<<<grid_of(draws.size()), kBlockThreads, 0, b.stream.get()>>>(b.rows(), b.input_at<mass_draw>(draws_at),
                                                                             b.output_at<int32_t>(0));
    DS_TRY(b.fetch(draws.size() * sizeof(int32_t)));
    b.take(0, tokens, draws.size() * sizeof(int32_t));
    return status::success();
}

status shard_rows::processed_logits(const std::vector<row_token>& at, float* logits) {
    buffers& b = *b_;
    if (at.empty()) return status::success();
    const size_t at_offset = b.pack(at);
    DS_TRY(b.send_inputs());
    DS_TRY(b.reserve_outputs(at.size() * sizeof(float)));
    const auto count = static_cast<int64_t>(at.size());
    gather_logits_kernel<<<grid_of((at.size() + kBlockThreads - 1) / kBlockThreads), kBlockThreads, 0,
                           b.stream.get()>>>(b.rows(), b.input_at<row_token>(at_offset), count, b.output_at<float>(0));
    DS_TRY(b.fetch(at.size() * sizeof(float)));
    b.take(0, logits, at.size() * sizeof(float));
    return status::success();
}

}  // namespace ds::cuda
