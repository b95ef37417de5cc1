// Samples one greedy and one seeded row through the installed package; exit 0 when the tokens are
// the expected ones.
#include <distsample/sampling.h>

#include <cstdio>
#include <vector>

int main() {
    const std::vector<float> logits{0.1f, 2.5f, -1.0f, 0.3f, 0.0f, 0.0f, 9.0f, 0.0f};
    std::vector<int32_t> predict(2), accept_index(2), accept_length(2);
    ds::sampling_call call;
    call.logits = {logits.data(), ds::logits_dtype::f32, 2, 4, 4, false};
    call.batch_size = 2;
    call.params.temperature = ds::param<float>::uniform(0.0f);
    call.outputs = {predict.data(), accept_index.data(), accept_length.data(), nullptr, nullptr};
    std::vector<unsigned char> workspace(ds::workspace_bytes(call) + 8);
    const ds::status s = ds::sample(call, {workspace.data(), workspace.size()});
    if (!s.is_ok()) {
        std::fprintf(stderr, "sample: %s\n", s.message.c_str());
        return 1;
    }
    std::printf("tokens %d %d\n", predict[0], predict[1]);
    return predict[0] == 1 && predict[1] == 2 ? 0 : 1;
}
