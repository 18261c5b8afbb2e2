// tessera/gpu/gpu_server.hpp: the GPU baseline as a backend process. One process holds the
// whole model in one shared memory; a pool of worker threads runs whole batches GPU style
// (padded layouts through models::padded_forward, packed through models::reference_forward), in
// the model's dtype (fp32, or bf16 after models::set_dtype: the single-process bf16 kernels);
// one io thread owns a ROUTER socket and speaks the backend wire protocol of protocol.hpp.
//
// Wire protocol (frames as in protocol.hpp: msgpack header, raw little-endian payloads):
//   client DEALER -> infer_batch{batch_id, seq_lengths, layout, padded_length, compute}
//                    + token ids (i32) + token type ids (i32), concatenated over sequences
//   server ROUTER -> infer_result{batch_id, code, message, num_labels, wall_seconds,
//                    modelled_seconds} + logits f32 [sequences, num_labels] when code == ok
//   Health: a `heartbeat` from the client is answered at once by the io thread with a
//   `heartbeat{tile_id 0, memory_used = batches queued or running, bad_messages}`; an
//   infer_batch with zero sequences is a ping too (answered with an ok infer_result, no rows).
//   A batch (or ping) whose `compute` dtype is not the model's is answered invalid_argument
//   naming both, so a host in bf16 never gets fp32 logits from a process started in fp32.
//   A message that fails validation is answered with infer_result{code bad_message} when its
//   batch id can be read, else counted (heartbeat.bad_messages) and dropped.
//
//   auto model = std::make_shared<const models::bert_model>(*models::load_model("bert-tiny"));
//   auto srv = gpu_server::create(model, {.bind = "tcp://127.0.0.1:0", .threads = 2});
//   std::cout << "listening on " << (*srv)->endpoint() << std::endl;
//   std::atomic<bool> stop{false};
//   (*srv)->run(stop);   // until stop; then answers every accepted batch and returns
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/model.hpp"
#include "tessera/timing/dtype.hpp"
#include "tessera/timing/preset.hpp"

namespace tessera::gpu {

struct gpu_server_config {
  std::string bind = "tcp://127.0.0.1:0";  ///< ROUTER endpoint (tcp://host:0 picks a port, ipc://path)
  int threads = 2;                          ///< worker threads (batches in parallel)
  int omp_threads = 1;                      ///< oneDNN/OpenMP threads inside one forward
  std::string preset = "a100-40gb";         ///< GPU preset of the timing model (modelled_seconds)
  /// The modelled clock's dtype: fp16 is the GPU's 16-bit tensor-core rate, which bf16 shares on
  /// the presets' GPUs, so it stays whatever the forward computes in (the model's dtype).
  timing::dtype timing_dtype = timing::dtype::fp16;
  bool serialize_forwards = true;           ///< see reference_backend.hpp (forwards take turns)
  size_t max_queued_batches = 4096;         ///< beyond it batches are answered `overloaded`
  std::string name = "gpu0";
};

class gpu_server {
 public:
  /// Loads the preset, starts the workers and binds the ROUTER.
  static result<std::unique_ptr<gpu_server>> create(std::shared_ptr<const models::bert_model> model,
                                                     gpu_server_config cfg);
  ~gpu_server();
  gpu_server(const gpu_server&) = delete;
  gpu_server& operator=(const gpu_server&) = delete;

  /// The endpoint clients connect to (the bound port resolved).
  const std::string& endpoint() const;
  /// Serves until `stop` becomes true (checked every 50 ms); then stops reading requests,
  /// answers every batch already accepted and returns.
  void run(const std::atomic<bool>& stop);

  uint64_t bad_messages() const;
  uint64_t batches_answered() const;

  struct impl;

 private:
  explicit gpu_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// The modelled time of a batch of these lengths on the preset (pad_to 0: padded to the
/// longest, as a GPU runs a packed request). 0 when the model's shape cannot be costed.
double modelled_gpu_seconds(const timing::gpu_preset& preset, const models::bert_config& cfg,
                            timing::dtype t, const std::vector<int32_t>& lengths, int32_t pad_to);

}  // namespace tessera::gpu
