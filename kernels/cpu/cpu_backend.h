// The CPU sampling backend: the reference implementation of docs/semantics.md. Requests are spread
// over a fixed thread pool (one request's verify chain stays on one thread); each thread owns a
// row_sampler, so a step allocates nothing.
#pragma once

#include <memory>
#include <vector>

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
    void run_steps(const step_input& step, const step_output& out);
    void run_request(const step_input& step, const step_output& out, int32_t request, row_sampler& sampler) const;

    kernel_config config_;
    param_pool pool_;
    thread_pool threads_;
    std::vector<row_sampler> samplers_;  // one per thread
};

}  // namespace ds::cpu
