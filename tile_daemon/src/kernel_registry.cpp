#include "tessera/tile/kernel_registry.hpp"

namespace tessera::tile {

kernel_registry kernel_registry::with_builtins() {
  kernel_registry r;
  register_basic_kernels(r);
  register_bert_kernels(r);
  register_decoder_kernels(r);
  return r;
}

void kernel_registry::add(std::string name, kernel_signature sig, kernel_fn fn) {
  kernels_[std::move(name)] = entry{sig, std::move(fn)};
}

std::vector<std::string> kernel_registry::names() const {
  std::vector<std::string> v;
  for (const auto& [n, _] : kernels_) v.push_back(n);
  return v;
}

status kernel_registry::check(const exchange::kernel_call& call) const {
  auto it = kernels_.find(call.kernel);
  if (it == kernels_.end()) return status::not_found("no kernel named '" + call.kernel + "' on this tile");
  const auto& s = it->second.sig;
  if (call.inputs.size() < s.min_inputs || call.inputs.size() > s.max_inputs)
    return status::invalid("kernel '" + call.kernel + "' takes " + std::to_string(s.min_inputs) + ".." +
                           std::to_string(s.max_inputs) + " inputs, got " + std::to_string(call.inputs.size()));
  if (call.outputs.size() < s.min_outputs || call.outputs.size() > s.max_outputs)
    return status::invalid("kernel '" + call.kernel + "' takes " + std::to_string(s.min_outputs) + ".." +
                           std::to_string(s.max_outputs) + " outputs, got " + std::to_string(call.outputs.size()));
  return ok_status();
}

status kernel_registry::run(const exchange::kernel_call& call, tile_memory& memory, const kernel_context& ctx) const {
  auto it = kernels_.find(call.kernel);
  if (it == kernels_.end()) return status::not_found("no kernel named '" + call.kernel + "' on this tile");
  tile_tensor* ins[64];
  tile_tensor* outs[64];
  if (call.inputs.size() > 64 || call.outputs.size() > 64) return status::invalid("too many kernel operands");
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    ins[i] = memory.find(call.inputs[i]);
    if (!ins[i])
      return status::not_found("kernel '" + call.kernel + "': input tensor id " + std::to_string(call.inputs[i]) +
                               " is not in tile " + std::to_string(memory.tile_id()) + "'s memory");
  }
  for (size_t i = 0; i < call.outputs.size(); ++i) {
    outs[i] = memory.find(call.outputs[i]);
    if (!outs[i])
      return status::not_found("kernel '" + call.kernel + "': output tensor id " + std::to_string(call.outputs[i]) +
                               " is not in tile " + std::to_string(memory.tile_id()) + "'s memory");
  }
  if (!it->second.sig.bf16)
    for (auto* t : std::span<tile_tensor* const>(ins, call.inputs.size()))
      if (t->desc.type == exchange::dtype::bf16)
        return status::unsupported("kernel '" + call.kernel + "' does not take bf16 tensors ('" + t->desc.name + "')");
  if (!it->second.sig.bf16)
    for (auto* t : std::span<tile_tensor* const>(outs, call.outputs.size()))
      if (t->desc.type == exchange::dtype::bf16)
        return status::unsupported("kernel '" + call.kernel + "' does not take bf16 tensors ('" + t->desc.name + "')");
  kernel_args args{ctx, {ins, call.inputs.size()}, {outs, call.outputs.size()}, call.params, call.fparams};
  status st = it->second.fn(args);
  if (!st.ok()) return st.with_context("kernel '" + call.kernel + "'");
  return st;
}

}  // namespace tessera::tile
