// The CPU sampling backend: the reference implementation of docs/semantics.md. Requests are spread
// over a fixed thread pool (one request's verify chain stays on one thread); each thread owns a
// row_sampler, so a step allocates nothing.
#pragma once

#include <memory>
#include <vector>

#include "kernels/chain_step.h"
#include "kernels/cpu/row_sampler.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/sampling_backend.h"

namespace ds::cpu {

class cpu_backend final : public sampling_backend {
   public:
    explicit cpu_backend(const kernel_config& config);

    const char* name() const override { return "cpu"; }
    const kernel_config& config() const override { return config_; }
    param_pool& pool() override { return pool_; }

    status sample(const step_input& step, const step_output& out) override;
    status verify(const step_input& step, const step_output& out) override;

   private:
    status run(const step_input& step, step_kind kind, const step_output& out);

    kernel_config config_;
    param_pool pool_;
    thread_pool threads_;
    std::vector<row_sampler> samplers_;  // one per thread
};

// One request's chain: rows b*N .. b*N+N-1 of `step`, written to step.outputs.
void run_request(const chain_step& step, const request_view& request, int32_t b, row_sampler& sampler);

// An engine's sampling_call on the host (already checked), on the calling thread; the workspace
// holds one row_sampler's scratch.
void run_call(const sampling_call& call, workspace_ref workspace);
std::size_t call_workspace_bytes(int32_t vocab);

}  // namespace ds::cpu
