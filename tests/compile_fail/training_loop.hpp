// What the strategy and precision cases run through the real Accelerator: every call that reaches
// a member of either contract (parallel/contract.hpp, precision/contract.hpp), so that a twin
// proves its policy's behaviour is complete and a case proves nothing but the contract's message
// is reported.
#pragma once

#include <accel/accelerator.hpp>

template <class Accelerator>
void training_loop() {
  Accelerator accelerator;
  torch::nn::Linear net(2, 2);
  torch::optim::AdamW adamw(net->parameters());
  auto [model, optimizer] = accelerator.prepare(net, adamw);
  accelerator.backward(model(torch::ones({1, 2})).sum());
  accelerator.clip_grad_norm(1.0);
  optimizer.step();
  optimizer.zero_grad();
  [[maybe_unused]] const auto memory = accelerator.memory_use();
  [[maybe_unused]] auto whole = accelerator.full_parameters(model);
}
