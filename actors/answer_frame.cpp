#include "actors/answer_frame.h"

#include <fmt/format.h>

#include <cstring>

#include "actors/dist_step.h"

namespace ds {

namespace {

constexpr size_t kHeaderBytes = sizeof(uint64_t) + 2 * sizeof(int32_t) + sizeof(uint64_t) + 5 * sizeof(int64_t);

template <class T>
void put(std::string& out, const T& value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <class T>
void put_all(std::string& out, const std::vector<T>& values) {
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Reads the body in order; the caller has checked its length.
class body_reader {
   public:
    explicit body_reader(std::string_view body) : at_(body.data()) {}
    template <class T>
    T take() {
        T value;
        std::memcpy(&value, at_, sizeof value);
        at_ += sizeof value;
        return value;
    }
    template <class T>
    void take_all(std::vector<T>& values) {
        std::memcpy(values.data(), at_, values.size() * sizeof(T));
        at_ += values.size() * sizeof(T);
    }

   private:
    const char* at_;
};

}  // namespace

size_t answer_body_bytes(int64_t bs, int64_t n) {
    return kHeaderBytes + static_cast<size_t>(bs * n + bs) * 4 + static_cast<size_t>(bs * n) * 8 +
           static_cast<size_t>(bs);
}

void append_answer(const rank_result& result, std::string& out) {
    const step_outputs& o = *result.outputs;
    const int32_t bs = o.batch_size();
    const int32_t n = bs == 0 ? 0 : static_cast<int32_t>(o.accept_index.size() / static_cast<size_t>(bs));
    out.reserve(out.size() + answer_body_bytes(bs, n));
    put(out, result.step_id);
    put(out, bs);
    put(out, n);
    put(out, result.digest);
    const step_timing& t = result.timing;
    for (int64_t v :
         {t.rank_step_ns, t.rank_transport_ns, t.rank_received_bytes, t.rank_began_at_ns, t.rank_answered_at_ns})
        put(out, v);
    put_all(out, o.packed);
    put_all(out, o.accept_index);
    put_all(out, o.logprobs);  // their bytes: the bits, NaN payloads included
    put_all(out, o.row_error);
}

std::string encode_answer(const rank_result& result) {
    std::string body;
    append_answer(result, body);
    return body;
}

uint64_t answer_step_id(std::string_view body) {
    if (body.size() < sizeof(uint64_t)) return 0;
    return body_reader(body).take<uint64_t>();
}

status decode_answer(std::string_view body, int32_t rank, const dist_step& step, rank_result& out) {
    if (body.size() < kHeaderBytes)
        return status::invalid(fmt::format("answer of {} bytes: expected at least {}", body.size(), kHeaderBytes));
    body_reader in(body);
    out = rank_result{};
    out.rank = rank;
    out.step_id = in.take<uint64_t>();
    const auto bs = in.take<int32_t>();
    const auto n = in.take<int32_t>();
    if (out.step_id != step.id) return status::invalid(fmt::format("step id = {}: expected {}", out.step_id, step.id));
    if (bs != step.plan.bs || n != step.plan.tokens_per_req)
        return status::invalid(fmt::format("step {}: bs = {}, N = {}: expected {} and {}", step.id, bs, n, step.plan.bs,
                                           step.plan.tokens_per_req));
    if (body.size() != answer_body_bytes(bs, n))
        return status::invalid(
            fmt::format("step {}: answer of {} bytes: expected {}", step.id, body.size(), answer_body_bytes(bs, n)));
    out.digest = in.take<uint64_t>();
    step_timing& t = out.timing;
    for (int64_t* v :
         {&t.rank_step_ns, &t.rank_transport_ns, &t.rank_received_bytes, &t.rank_began_at_ns, &t.rank_answered_at_ns})
        *v = in.take<int64_t>();
    auto outputs = std::make_shared<step_outputs>();
    outputs->resize(bs, n);
    in.take_all(outputs->packed);
    in.take_all(outputs->accept_index);
    in.take_all(outputs->logprobs);
    in.take_all(outputs->row_error);
    if (outputs->digest() != out.digest)
        return status::invalid(
            fmt::format("step {}: digest = {:#x}: the outputs hash to {:#x}", step.id, out.digest, outputs->digest()));
    out.outputs = std::move(outputs);
    return status::success();
}

}  // namespace ds
