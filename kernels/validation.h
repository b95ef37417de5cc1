// Range checks for everything that crosses into the kernels. Each failure names the field, the
// value and the allowed range, e.g. "requests[3].top_p = 1.5: expected a number in (0, 1]".
#pragma once

#include <string_view>

#include "config/kernel_config.h"
#include "kernels/request_view.h"
#include "kernels/sampling_types.h"

namespace ds {

// `prefix` is prepended to field names ("requests[3]." gives "requests[3].top_p").
status validate_sampling_params(const sampling_params& params, const kernel_config& config,
                                std::string_view prefix = {});

status validate_thresholds(const verify_thresholds& thresholds, std::string_view prefix = {});

// The allowed range of a sampling parameter, in words ("a number in (0, 1]").
const char* range_of(std::string_view field);

// The per-call scalars, slot indexing and lists of an engine call (arrays are checked per row on
// the device, kernels/request_view.h).
status validate_call_params(const sampling_call& call);

// Shapes, slots, positions, candidates, coins and thresholds of one step.
status validate_step(const step_input& step, step_kind kind, const kernel_config& config);

}  // namespace ds
