// commit_tokens on the host (kernels/commit_rules.h).
#pragma once

#include <distsample/sampling.h>

namespace ds::cpu {

void commit_tokens(const commit_call& call);

}  // namespace ds::cpu
