// The GPU baseline's decoder backend. See gpu_llm.hpp.
#include "tessera/backends/gpu_llm.hpp"

#include "tessera/backends/decoder_backend.hpp"
#include "tessera/timing/llm_system.hpp"

namespace tessera::backends {

timing::llm_step_batch step_shape(const models::step_batch& b) {
  timing::llm_step_batch out;
  for (const auto& s : b.seqs) {
    if (s.tokens.size() == 1 && s.want_logits)
      out.decode_contexts.push_back(s.start_pos);
    else
      out.prefills.push_back({static_cast<int64_t>(s.tokens.size()), s.start_pos, s.want_logits});
  }
  return out;
}

namespace {

class gpu_llm_backend : public backends::llm_backend {
 public:
  gpu_llm_backend(std::shared_ptr<backends::step_fn_backend> inner, timing::llm_system sys, timing::decoder_dims dims)
      : inner_(std::move(inner)), sys_(std::move(sys)), dims_(dims) {}
  ~gpu_llm_backend() override { inner_->stop(); }
  backends::llm_backend_info info() const override {
    auto i = inner_->info();
    i.kind = "gpu";
    return i;
  }
  bool healthy() const override { return inner_->healthy(); }
  void submit(backends::step_batch batch, std::function<void(backends::step_result)> done) override {
    // An empty or malformed batch has no modelled time: the step itself reports the error.
    auto t = timing::model_llm_step(sys_, dims_, step_shape(batch));
    const double modelled = t ? t->seconds : 0;
    inner_->submit(std::move(batch), [done = std::move(done), modelled](backends::step_result r) {
      if (r.st.code() == errc::ok) r.modelled_seconds = modelled;
      done(std::move(r));
    });
  }

 private:
  std::shared_ptr<backends::step_fn_backend> inner_;
  timing::llm_system sys_;
  timing::decoder_dims dims_;
};

}  // namespace

result<std::shared_ptr<backends::llm_backend>> make_gpu_llm_backend(std::shared_ptr<const models::decoder_model> model,
                                                                    gpu_llm_options opts) {
  auto dims = timing::decoder_dims_of(model->shape());
  if (!dims) return dims.error();
  auto sys = timing::make_llm_system(opts.system, *dims);
  if (!sys) return sys.error().with_context("--preset " + opts.system);
  if (sys->kind != "gpu")
    return status::invalid("--preset " + opts.system + " is a " + sys->kind + " system; tessera-gpu models a GPU");
  auto inner = backends::make_decoder_backend(
      std::move(model), {.name = opts.name, .kind = "gpu", .kv = opts.kv, .omp_threads = opts.omp_threads});
  if (!inner) return inner.error();
  return std::shared_ptr<backends::llm_backend>(new gpu_llm_backend(std::move(*inner), std::move(*sys), *dims));
}

}  // namespace tessera::backends
