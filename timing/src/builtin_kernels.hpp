// Registration of the built-in kernel estimators (private header).
#pragma once

#include "tessera/timing/estimator.hpp"

namespace tessera::timing::detail {

/// Adds every kernel listed in kernel_query.hpp to `r`.
void add_builtin_kernels(estimator_registry& r);

}  // namespace tessera::timing::detail
