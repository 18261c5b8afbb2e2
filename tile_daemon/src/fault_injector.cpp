#include "tessera/tile/fault_injector.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "tessera/common/log.hpp"

namespace tessera::tile {

using exchange::fault_kind;

fault_injector::fault_injector(exchange::fault_plan plan, int tile, uint32_t incarnation)
    : plan_(std::move(plan)), tile_(tile), incarnation_(incarnation) {
  rng_ = plan_.seed * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(tile) << 32) ^ incarnation;
}

status fault_injector::check(const exchange::fault_plan& plan) {
  for (size_t i = 0; i < plan.faults.size(); ++i)
    if (!exchange::applied_by_tile(plan.faults[i].kind))
      return status::invalid("fault " + std::to_string(i) + " (" + std::string(fault_kind_name(plan.faults[i].kind)) +
                             ") cannot be applied by a tile: tessera-host --faults applies it to the tessera-gpu "
                             "process it spawned");
  return ok_status();
}

exchange::fault_counts fault_injector::counts() const {
  exchange::fault_counts c{};
  for (size_t k = 0; k < c.size(); ++k) c[k] = counts_[k].load(std::memory_order_relaxed);
  return c;
}

double fault_injector::uniform() {
  uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / double(1ull << 53);
}

void fault_injector::begin_batch() { ++batch_; }

void fault_injector::at_superstep(int64_t superstep) {
  for (const auto& f : plan_.faults) {
    // Kills and stalls are meant once: the restarted incarnation of the tile runs on.
    if ((f.kind != fault_kind::kill && f.kind != fault_kind::stall) || f.tile != tile_ || incarnation_ != 0 ||
        (f.batch != 0 && f.batch != batch_) || f.superstep != superstep)
      continue;
    count(f.kind);
    if (f.kind == fault_kind::kill) {
      TESSERA_LOG_WARN("fault plan: killing tile " << tile_ << " at batch " << batch_ << " superstep " << superstep);
      ::kill(::getpid(), SIGKILL);
    }
    TESSERA_LOG_WARN("fault plan: tile " << tile_ << " stalls for " << f.seconds << " s at batch " << batch_
                                         << " superstep " << superstep << " (no heartbeats, no answers)");
    stalled_.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    stalled_.store(false, std::memory_order_release);
  }
}

void fault_injector::after_compute(std::chrono::nanoseconds elapsed) {
  for (const auto& f : plan_.faults)
    if (f.kind == fault_kind::slow && (f.tile == -1 || f.tile == tile_) && f.factor > 1) {
      count(f.kind);
      std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed * (f.factor - 1)));
    }
}

bool fault_injector::partitioned(int peer) const {
  for (const auto& f : plan_.faults) {
    if (f.kind != fault_kind::partition) continue;
    if (f.batch != 0 && (batch_ < f.batch || batch_ >= f.batch + f.batches)) continue;
    const bool me = std::find(f.tiles.begin(), f.tiles.end(), tile_) != f.tiles.end();
    const bool them = std::find(f.tiles.begin(), f.tiles.end(), peer) != f.tiles.end();
    if (me != them) return true;
  }
  return false;
}

send_decision fault_injector::on_send(int peer, size_t bytes) {
  send_decision d;
  if (partitioned(peer)) {
    d.drop = true;
    count(fault_kind::partition);
    return d;
  }
  for (const auto& f : plan_.faults) {
    if (f.tile != -1 && f.tile != tile_) continue;
    switch (f.kind) {
      case fault_kind::delay:
        if (f.to == -1 || f.to == peer) {
          double ms = f.ms + (f.jitter_ms > 0 ? (uniform() * 2 - 1) * f.jitter_ms : 0);
          d.delay += std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, ms) * 1000));
        }
        break;
      case fault_kind::drop: d.drop |= uniform() < f.fraction; break;
      case fault_kind::duplicate: d.duplicate |= uniform() < f.fraction; break;
      case fault_kind::reorder: d.hold |= uniform() < f.fraction; break;
      case fault_kind::corrupt: d.corrupt |= uniform() < f.fraction && bytes > 0; break;
      default: break;
    }
  }
  if (d.delay.count() > 0) count(fault_kind::delay);
  if (d.drop) {
    d.duplicate = d.hold = d.corrupt = false;
    count(fault_kind::drop);
  }
  if (d.duplicate) count(fault_kind::duplicate);
  if (d.hold) count(fault_kind::reorder);
  if (d.corrupt) count(fault_kind::corrupt);
  return d;
}

}  // namespace tessera::tile
