// BERT's kernels for tile programs: thin adapters from tile tensors to models/kernels.hpp.
#include "tessera/tile/kernel_registry.hpp"

namespace tessera::tile {

void register_bert_kernels(kernel_registry& reg) {}

}  // namespace tessera::tile
