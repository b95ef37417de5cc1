// make_cuda_shard_primitives in a build without CUDA.
#include "sharded/shard_primitives.h"

namespace ds {

status make_cuda_shard_primitives(const group_config&, std::unique_ptr<shard_primitives>&) {
    return {status_code::unsupported, "sharded mode on the cuda backend: this build has no CUDA"};
}

}  // namespace ds
