// distsample's one error type: every call returns a `status` (or a `result<T>`, a value or the
// status saying why there is none). Public and self-contained; core/status.h adds the internal
// DS_TRY helpers.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace ds {

enum class status_code : int {
    ok = 0,
    invalid_argument,  // a field is out of its allowed range (message names it)
    unsupported,       // the backend cannot do what was asked (e.g. CUDA not built)
    internal,
    timeout,   // a wait ran past its deadline (message names who was waited for)
    aborted,   // the operation was cancelled (rank group aborted, actor gone)
    mismatch,  // ranks produced different outputs (rank-0 policy `never`)
};

struct [[nodiscard]] status {
    status_code code = status_code::ok;
    std::string message;

    static status success() { return {}; }
    static status invalid(std::string msg) { return {status_code::invalid_argument, std::move(msg)}; }
    static status error(status_code code, std::string msg) { return {code, std::move(msg)}; }
    bool is_ok() const { return code == status_code::ok; }
};

// A value, or the status saying why there is none (std::expected's shape, for C++17).
template <class T>
class [[nodiscard]] result {
   public:
    result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, like std::expected
    result(status failure) : failure_(std::move(failure)) {
        if (failure_.is_ok()) failure_ = {status_code::internal, "result built from an ok status without a value"};
    }

    bool is_ok() const { return value_.has_value(); }
    const status& error() const { return failure_; }
    // The status to pass on: ok when there is a value.
    status to_status() const { return is_ok() ? status::success() : failure_; }

    T& value() & { return *value_; }
    const T& value() const& { return *value_; }
    T&& value() && { return std::move(*value_); }
    T* operator->() { return &*value_; }
    const T* operator->() const { return &*value_; }
    T& operator*() & { return *value_; }
    const T& operator*() const& { return *value_; }

   private:
    std::optional<T> value_;
    status failure_;
};

}  // namespace ds
