// One TP rank without the actor around it: everything a rank does, for the rank actors of one
// process, the rank processes (`distsample rank`) and the public rank API
// (include/distsample/rank.h) alike (docs/architecture.md, Rank actors). It owns the rank's
// transport endpoint (with the fault-injecting decorator around it), its engine (parameter pool,
// sampling backend or sharded sampler), its fault plan and test hooks, the refusal of a repeated
// step id, the commit of agreed outputs, and the model context of every request when the rank
// makes its own logits. Plain C++ (no CAF), so it is tested without the actors.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <distsample/group.h>
#include <distsample/testing.h>

#include "actors/dist_step.h"
#include "actors/rank_engine.h"
#include "config/fault_plan.h"
#include "core/wakeable_sleep.h"
#include "sources/logits_source.h"
#include "transport/faulty_transport.h"
#include "transport/transport_group.h"

namespace ds {

// A rank's answer to a step: its outputs (or why it failed) and their digest. In one process the
// outputs are shared, not copied; between processes they travel by value (actors/messages.h).
struct rank_result {
    int32_t rank = 0;
    uint64_t step_id = 0;
    int32_t code = 0;  // status_code
    std::string message;
    uint64_t digest = 0;
    std::shared_ptr<const step_outputs> outputs;
    step_timing timing;
};

// A rank's shard rows of a step, packed (row stride = the shard's vocab), as they travel to a
// rank in another process when the coordinator has the logits (topology.logits_source = wire).
struct shard_payload {
    logits_dtype dtype = logits_dtype::f32;
    std::vector<uint8_t> bytes;
};

// Where a rank runs: its threads are the process's (a fault `crash` is ignored, a `hang` never
// runs the step), or it is a process of its own (`crash` exits it; a `hang` runs the step with its
// peers and only withholds the answer: over UCX a peer that never enters a collective looks slow,
// not gone, and the peers' timeouts would blame themselves).
enum class rank_host { thread, process };

// Supplies the rank's shard of a step's rows when neither the step nor its message carries them:
// the rank's own model (topology.logits_source), or the worker process that embeds the rank.
class shard_supplier {
   public:
    // This rank's part of a step once its shard is there (bs * N rows of its vocab shard).
    using shard_work = std::function<status(const logits_view& shard)>;

    virtual ~shard_supplier() = default;
    // Runs `work` on the step's shard once and returns its status, or why there is no shard (the
    // wait for it is bounded). The supplier picks the thread: a model worker's own thread works
    // on the shard it hands in (worker_handoff), so the step goes on without a thread wake-up.
    virtual status with_shard(const dist_step& step, const shard_work& work) = 0;
    // The request in `slot` was registered with `history`, or released (empty).
    virtual void on_register(int32_t slot, const std::vector<int32_t>& history) = 0;
    // The group agreed on `outputs` for `step` (its last supplied one).
    virtual void on_commit(const dist_step& step, const step_outputs& outputs) = 0;
};

// A shard_supplier over a logits_source: row b*N+j is the model's distribution after the
// request's context (its registered history and the tokens committed since, the last two as an
// n-gram window) and its drafts 1..j, as the gateway's model makes them (gateway/steps.cpp).
std::unique_ptr<shard_supplier> make_model_supplier(const logits_source& model, int32_t rank, int32_t max_slots);

// What a rank does with a step message, decided before it runs it.
struct step_admission {
    status refusal;              // not ok: a repeated step id (the sender took the first answer)
    bool crash = false;          // exit the process now (rank processes only)
    bool drop = false;           // neither run nor answer (the message "never arrived")
    bool run = true;             // run the step (false: a hang of a rank thread)
    bool answer = true;          // answer it (false: a hang)
    bool deliver_again = false;  // duplicate_control: the message arrives a second time
    rank_step_faults faults;
    armed_transport_faults transport_faults;
    uint64_t plan_epoch = 0;  // the delays' epoch when the plan was read: a later wake ends them
};

// The desync faults (config/fault_plan.h): a changed first token, a changed first accept length
// (the digest catches both: docs/architecture.md, Rank-0 policy and desync events).
void alter_outputs(bool token, bool accept_length, int32_t vocab, int32_t n, step_outputs& out);

// How long a rank whose put was dropped waits before it gives up: until it has been named, by the
// coordinator's step timeout or its peers' transport timeout, whichever comes first, so that it
// is back for the next step (or the next epoch's rendezvous).
std::chrono::milliseconds drop_put_wait(const group_config& config);

class rank_core {
   public:
    // `delays`: where the plan's delays sleep (a new plan wakes them). `supplier`: the rank's
    // shard when the step brings none (null: the steps bring them).
    rank_core(const group_config& config, int32_t rank, rank_host host, std::shared_ptr<wakeable_sleep> delays,
              std::unique_ptr<shard_supplier> supplier = nullptr);
    ~rank_core();

    int32_t rank() const { return rank_; }
    const group_config& config() const { return config_; }

    // The endpoint of a rank thread, for the group's lifetime; each step enters `group`'s epoch.
    status attach(transport_group& group);
    // A rank process's endpoint of a new epoch (the old one is dropped first, and with it every
    // registration: the coordinator sends them again).
    status attach(std::unique_ptr<transport> endpoint);
    void detach();

    // Ok when the rank has an endpoint and its backend was built, else why not.
    status health() const;
    status register_request(int32_t slot, const sampling_params& params, const std::vector<int32_t>& history);
    status release(int32_t slot);

    void set_fault_plan(std::shared_ptr<const fault_plan> plan);
    // A test hook (group.h, rank_fault): fires on the next step only.
    void set_hook(rank_fault hook) { hook_ = hook; }

    // Decides what happens to step `step_id`: step ids only grow, so a repeat is refused.
    step_admission admit(uint64_t step_id);
    // Called once with the step's result, on the thread that made it, before run() returns: what
    // it sends (the answer lane) leaves a worker's rank without waking the rank's thread.
    using result_callback = std::function<void(rank_result& result)>;
    // Runs an admitted step on its logits: the step's shards (rank threads), `payload` (sent by
    // the coordinator), or the supplier's (on the supplier's thread: shard_supplier::with_shard).
    rank_result run(std::shared_ptr<const dist_step> step, const shard_payload& payload, const step_admission& a,
                    const result_callback& on_result = {});
    // Adds step `step_id`'s outputs to the slots' penalty counts (and the supplier's contexts):
    // `agreed`, or the rank's own when null. A commit for another step than the last is ignored.
    status commit(uint64_t step_id, const step_outputs* agreed);

   private:
    status with_shard_of(const dist_step& step, const shard_payload& payload, const shard_supplier::shard_work& work);
    status run_engine(const dist_step& step, const logits_view& shard, const step_admission& a, step_outputs& out);
    void finish(const std::shared_ptr<const dist_step>& step, const step_admission& a, status s,
                std::shared_ptr<step_outputs> outputs, rank_result& result);

    group_config config_;
    int32_t rank_;
    rank_host host_;
    std::shared_ptr<wakeable_sleep> delays_;
    std::unique_ptr<shard_supplier> supplier_;
    transport_group* group_ = nullptr;            // a rank thread's group, entered per step
    std::unique_ptr<transport> owned_;            // a rank process's endpoint of this epoch
    std::unique_ptr<faulty_transport> endpoint_;  // around *owned_ or the group's endpoint
    std::unique_ptr<rank_engine> engine_;         // uses *endpoint_
    std::shared_ptr<const fault_plan> plan_;
    rank_fault hook_ = rank_fault::none;
    uint64_t last_step_id_ = 0;  // the latest step id received
    std::shared_ptr<const dist_step> last_step_;
    std::shared_ptr<const step_outputs> last_outputs_;
};

}  // namespace ds
