#include "tessera/tile/kernel_registry.hpp"

#include <span>
#include <tuple>

namespace tessera::tile {

kernel_registry kernel_registry::with_builtins() {
  kernel_registry r;
  register_basic_kernels(r);
  register_bert_kernels(r);
  register_decoder_kernels(r);
  return r;
}

void kernel_registry::add(models::kernel_id id, kernel_signature sig, kernel_fn fn) {
  kernels_[id] = entry{sig, std::move(fn)};
}

std::vector<std::string> kernel_registry::names() const {
  std::vector<std::string> v;
  for (const auto& [id, _] : kernels_) v.emplace_back(models::kernel_name(id));
  return v;
}

namespace {
std::string name_of(const exchange::kernel_call& call) {
  return static_cast<size_t>(call.kernel) < models::all_kernels.size()
             ? std::string(models::kernel_name(call.kernel))
             : "#" + std::to_string(static_cast<int>(call.kernel));
}
}  // namespace

status kernel_registry::check(const exchange::kernel_call& call) const {
  auto it = kernels_.find(call.kernel);
  if (it == kernels_.end()) return status::not_found("no kernel '" + name_of(call) + "' on this tile");
  if (auto err = models::check_params(call.kernel, call.params, call.fparams))
    return status::invalid("kernel '" + name_of(call) + "' parameters: " + *err);
  const auto& s = it->second.sig;
  if (call.inputs.size() < s.min_inputs || call.inputs.size() > s.max_inputs)
    return status::invalid("kernel '" + name_of(call) + "' takes " + std::to_string(s.min_inputs) + ".." +
                           std::to_string(s.max_inputs) + " inputs, got " + std::to_string(call.inputs.size()));
  if (call.outputs.size() < s.min_outputs || call.outputs.size() > s.max_outputs)
    return status::invalid("kernel '" + name_of(call) + "' takes " + std::to_string(s.min_outputs) + ".." +
                           std::to_string(s.max_outputs) + " outputs, got " + std::to_string(call.outputs.size()));
  return ok_status();
}

status kernel_registry::run(const exchange::kernel_call& call, tile_memory& memory, const kernel_context& ctx) const {
  auto it = kernels_.find(call.kernel);
  if (it == kernels_.end()) return status::not_found("no kernel '" + name_of(call) + "' on this tile");
  tile_tensor* ins[64];
  tile_tensor* outs[64];
  if (call.inputs.size() > 64 || call.outputs.size() > 64) return status::invalid("too many kernel operands");
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    ins[i] = memory.find(call.inputs[i]);
    if (!ins[i])
      return status::not_found("kernel '" + name_of(call) + "': input tensor id " + std::to_string(call.inputs[i]) +
                               " is not in tile " + std::to_string(memory.tile_id()) + "'s memory");
  }
  for (size_t i = 0; i < call.outputs.size(); ++i) {
    outs[i] = memory.find(call.outputs[i]);
    if (!outs[i])
      return status::not_found("kernel '" + name_of(call) + "': output tensor id " + std::to_string(call.outputs[i]) +
                               " is not in tile " + std::to_string(memory.tile_id()) + "'s memory");
  }
  // A kernel that does not declare a narrow dtype never sees it (it would read the bytes as f32).
  for (auto [type, takes, what] : {std::tuple{exchange::dtype::bf16, it->second.sig.bf16, "bf16"},
                                   std::tuple{exchange::dtype::i8, it->second.sig.int8, "int8"}}) {
    if (takes) continue;
    for (auto ts : {std::span<tile_tensor* const>(ins, call.inputs.size()), std::span<tile_tensor* const>(outs, call.outputs.size())})
      for (auto* t : ts)
        if (t->desc.type == type)
          return status::unsupported("kernel '" + name_of(call) + "' does not take " + what + " tensors ('" +
                                     t->desc.name + "')");
  }
  kernel_args args{ctx, {ins, call.inputs.size()}, {outs, call.outputs.size()}, call.params, call.fparams};
  status st = it->second.fn(args);
  if (!st.ok()) return st.with_context("kernel '" + name_of(call) + "'");
  return st;
}

}  // namespace tessera::tile
