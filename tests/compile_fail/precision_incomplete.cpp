// expect: accel: precision::Precision<Prec> lacks a setup hook
// expect: accel: precision::Precision<Prec> lacks a loss-scaling hook
// expect: accel: precision::Precision<Prec> lacks part of its checkpoint state
// A precision written by hand with one member of each role left out (prepare_model, may_step,
// check_state): each role is named, and nothing else is reported. The twin writes them.
#include "training_loop.hpp"

struct MyPrecision {
  using category = accel::policy::precision_tag;
  static constexpr std::string_view name = "MyPrecision";
  static constexpr auto compute = accel::policy::ComputeType::float32;
  static constexpr bool autocast = false;
  static constexpr bool loss_scaling = false;
};

template <>
struct accel::precision::Precision<MyPrecision> {
  struct state_type {
    template <class Json>
    friend void to_json(Json& json, const state_type& /*state*/) {
      json = Json::object();
    }
    template <class Json>
    friend void from_json(const Json& /*json*/, state_type& /*state*/) {}
  };
  void attach(accel::runtime::ProcessGroup* /*group*/, const accel::Options& /*options*/,
              const torch::Device& /*device*/) {}
  void on_backward(accel::precision::WindowPosition /*position*/) {}
  torch::Tensor scale_loss(const torch::Tensor& loss) const { return loss; }
  double loss_scale() const { return 1.0; }
  template <class Strategy>
  void unscale(Strategy& /*strategy*/, torch::optim::Optimizer& /*optimizer*/) {}
  bool step_was_skipped() const { return false; }
  state_type state() const { return {}; }
  void load_state(const state_type& /*state*/) {}
#ifdef ACCEL_TWIN
  void prepare_model(const std::shared_ptr<torch::nn::Module>& /*model*/,
                     const std::string& /*label*/) {}
  template <class Strategy>
  bool may_step(Strategy& /*strategy*/, torch::optim::Optimizer& /*optimizer*/) {
    return true;
  }
  void check_state(const state_type& /*state*/) const {}
#endif
};

int main() { training_loop<accel::Accelerator<accel::Ddp, MyPrecision>>(); }
