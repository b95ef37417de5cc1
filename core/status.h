// The one error type for every module (defined in the public include/distsample/status.h), and
// the helpers that pass a failure on. Exceptions appear only at the command line's edge.
#pragma once

#include <distsample/status.h>

// Returns from the enclosing function with the status of `expr` when it failed.
#define DS_TRY(expr)                                        \
    do {                                                    \
        ::ds::status ds_try_status_ = (expr);               \
        if (!ds_try_status_.is_ok()) return ds_try_status_; \
    } while (0)

#define DS_CONCAT_INNER(a, b) a##b
#define DS_CONCAT(a, b) DS_CONCAT_INNER(a, b)
// `DS_TRY_ASSIGN(auto x, make_x());`: declares x from a result's value, or returns its status.
#define DS_TRY_ASSIGN(declaration, expr) DS_TRY_ASSIGN_IMPL(DS_CONCAT(ds_try_result_, __LINE__), declaration, expr)
#define DS_TRY_ASSIGN_IMPL(tmp, declaration, expr) \
    auto tmp = (expr);                             \
    if (!tmp.is_ok()) return tmp.error();          \
    declaration = std::move(tmp).value()
