// DeferredBuild's recording (the dispatcher fallback), replay and registry (deferred_build.hpp
// includes this file in header-only mode; compiled once with ACCEL_SEPARATE_COMPILATION).
// Longer than accel's files should be: the dispatcher fallback that records, the replay and the
// registry are one mechanism sharing private types (the recorded operations, the made tensors).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <string_view>
#include <utility>

#include "../deferred_build.hpp"
#include "../error.hpp"
#include "../shape_text.hpp"

namespace accel::detail {

namespace deferred {

// See deferred_build.hpp: included in the scope's thread only, with accel's fallback on it.
inline constexpr c10::DispatchKey key = c10::DispatchKey::TESTING_ONLY_GenericMode;

ACCEL_DECL DeferredBuild*& current() {
  static thread_local DeferredBuild* build = nullptr;
  return build;
}

// Calls f(tensor, &slot) for each tensor an argument holds (a tensor, a list of tensors, a list
// of optional tensors), slot being where a replacement goes.
template <class F>
void for_each_tensor(c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    torch::Tensor t = value.toTensor();
    f(t, [&value](const torch::Tensor& replacement) { value = replacement; });
  } else if (value.isTensorList()) {
    auto list = value.toTensorList();
    for (std::size_t i = 0; i < list.size(); ++i) {
      torch::Tensor t = list.get(i);
      f(t, [&list, i](const torch::Tensor& replacement) { list.set(i, replacement); });
    }
  } else if (value.isList()) {
    auto list = value.toList();
    for (std::size_t i = 0; i < list.size(); ++i) {
      c10::IValue element = list.get(i);
      if (!element.isTensor()) continue;
      torch::Tensor t = element.toTensor();
      f(t, [&list, i](const torch::Tensor& replacement) { list.set(i, replacement); });
    }
  }
}

ACCEL_DECL bool is_overwrite(const c10::OperatorHandle& op, bool random) {
  const std::string& name = op.schema().name();
  return random || name == "aten::fill_" || name == "aten::zero_" || name == "aten::copy_";
}

ACCEL_DECL void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard exclude(key);
  DeferredBuild* build = current();
  if (build == nullptr) {
    op.callBoxed(stack);
    return;
  }
  const auto& schema = op.schema();
  const std::size_t n = schema.arguments().size();
  const std::size_t first = stack->size() - n;
  const std::string& name = schema.name();

  bool any_tensor = false, random = false, reads_view = false;
  std::ptrdiff_t device_arg = -1;
  std::vector<std::size_t> reads;
  std::ptrdiff_t written_arg = -1;
  torch::Tensor written;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& argument = schema.arguments()[i];
    c10::IValue& value = (*stack)[first + i];
    if (argument.name() == "generator") {
      random = true;
      if (!value.isNone())
        fail("deferred_init: {} is given a generator of its own; an empty build replays the "
             "default CPU generator only; draw from the default generator, or build eagerly",
             name);
    }
    if (argument.name() == "device") device_arg = static_cast<std::ptrdiff_t>(i);
    const bool writes = argument.alias_info() != nullptr && argument.alias_info()->isWrite();
    for_each_tensor(value, [&](const torch::Tensor& t, auto&& /*replace*/) {
      if (!t.defined()) return;
      any_tensor = true;
      const std::ptrdiff_t id = build->id_of(t);
      if (id >= 0)
        reads.push_back(static_cast<std::size_t>(id));
      else if (build->aliases_made(t))
        reads_view = true;
      if (writes) {
        written_arg = static_cast<std::ptrdiff_t>(i);
        written = t;
      }
    });
  }

  // A factory at the default device: made on meta.
  if (!any_tensor && device_arg >= 0 && (*stack)[first + device_arg].isNone()) {
    DeferredBuild::Entry entry(op, std::vector<c10::IValue>(stack->begin() + first, stack->end()));
    entry.random = random;
    (*stack)[first + device_arg] = c10::IValue(c10::Device(c10::kMeta));
    op.callBoxed(stack);
    const std::size_t returned = schema.returns().size();
    for (std::size_t r = 0; r < returned; ++r) {
      c10::IValue& out = (*stack)[stack->size() - returned + r];
      if (!out.isTensor()) continue;
      entry.outputs.push_back({r, build->add_made(out.toTensor())});
      out = marked_unprepared(out.toTensor());  // the record keeps add_made's unmarked alias
    }
    build->add_entry(std::move(entry));
    return;
  }

  if (written.defined()) {
    const std::ptrdiff_t id = build->id_of(written);
    if (id < 0 && build->aliases_made(written))
      fail("deferred_init: {} writes into a view (shape [{}]) of a tensor made in the empty "
           "build (shape [{}]); the build records whole tensors only; write the tensor itself "
           "(copy_ a whole value), or build eagerly",
           name, shape_text(written.sizes()), shape_text(build->base_shape(written)));
    if (id >= 0) {
      if (written_arg != 0 || reads_view)
        fail("deferred_init: {} writes a tensor made in the empty build through argument #{}{}; "
             "only in-place operations on the tensor itself (uniform_, normal_, fill_, copy_, "
             "mul_...) are recorded; build eagerly",
             name, written_arg, reads_view ? " reading a view of one" : "");
      DeferredBuild::Entry entry(op, std::vector<c10::IValue>(stack->begin() + first, stack->end()));
      entry.written = id;
      entry.random = random;
      entry.overwrites = is_overwrite(op, random);
      for (const std::size_t r : reads)
        if (!(entry.overwrites && static_cast<std::ptrdiff_t>(r) == id)) entry.reads.push_back(r);
      build->add_entry(std::move(entry));
      // Not run: a meta tensor has no values. Every return of an in-place operator is its self.
      const torch::Tensor self = written;
      torch::jit::drop(*stack, n);
      for (const auto& ret : schema.returns()) {
        if (ret.alias_info() == nullptr || !ret.alias_info()->isWrite())
          fail("deferred_init: {} returns something other than the tensor it writes; the empty "
               "build cannot record it; build eagerly",
               name);
        stack->push_back(self);
      }
      return;
    }
    // A tensor from outside the scope written: runs now, unless it draws (then out of order).
  }
  if (reads.empty() && !reads_view) {
    if (random)
      fail("deferred_init: {} draws random numbers into a tensor made outside the empty build "
           "or with an explicit device{}; it would draw now, before the build's own draws that "
           "prepare() replays, so no tensor would match an eager build; make the tensor with "
           "the default device inside the build, or build eagerly",
           name, device_arg >= 0 ? " (a factory with .device(...) set)" : "");
    op.callBoxed(stack);
    return;
  }
  // Reads tensors of the build: run on meta; new results recorded, views of them not.
  std::vector<c10::IValue> arguments(stack->begin() + first, stack->end());
  op.callBoxed(stack);
  const std::size_t returned = schema.returns().size();
  DeferredBuild::Entry entry(op, std::move(arguments));
  entry.random = random;
  entry.reads = reads;
  for (std::size_t r = 0; r < returned; ++r) {
    c10::IValue& out = (*stack)[stack->size() - returned + r];
    if (!out.isTensor() || !out.toTensor().defined() || build->aliases_made(out.toTensor()))
      continue;
    if (reads_view)
      fail("deferred_init: {} computes a new tensor from a view of a tensor made in the empty "
           "build; the build records whole tensors only; build eagerly",
           name);
    entry.outputs.push_back({r, build->add_made(out.toTensor())});
    out = marked_unprepared(out.toTensor());
  }
  if (!entry.outputs.empty()) build->add_entry(std::move(entry));
}

ACCEL_DECL void register_fallback_once() {
  static const bool registered = [] {
    static torch::Library library(torch::Library::IMPL, "_", key, __FILE__, __LINE__);
    library.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
    return true;
  }();
  (void)registered;
}

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<const torch::nn::Module*, std::shared_ptr<DeferredBuild>>> builds;
};
ACCEL_DECL Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace deferred

ACCEL_DECL DeferredBuild::DeferredBuild() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator_state_ = generator.get_state();
}

// By storage and geometry rather than by TensorImpl: torch::empty() wraps the factory's result
// in a new TensorImpl over the same storage when another reference exists (make_variable), and
// detach() does too; each is the made tensor itself, where a narrower view is not.
ACCEL_DECL std::ptrdiff_t DeferredBuild::id_of(const torch::Tensor& t) const {
  if (!t.defined() || !t.is_meta() || !t.has_storage()) return -1;
  const auto found = id_by_storage_.find(t.storage().unsafeGetStorageImpl());
  if (found == id_by_storage_.end()) return -1;
  const torch::Tensor& made = made_[found->second];
  if (t.sizes() != made.sizes() || t.strides() != made.strides() ||
      t.storage_offset() != made.storage_offset() || t.scalar_type() != made.scalar_type())
    return -1;
  return static_cast<std::ptrdiff_t>(found->second);
}

ACCEL_DECL bool DeferredBuild::aliases_made(const torch::Tensor& t) const {
  return t.defined() && t.is_meta() && t.has_storage() &&
         id_by_storage_.count(t.storage().unsafeGetStorageImpl()) != 0;
}

ACCEL_DECL std::vector<std::int64_t> DeferredBuild::base_shape(const torch::Tensor& t) const {
  const auto found = id_by_storage_.find(t.storage().unsafeGetStorageImpl());
  return found == id_by_storage_.end() ? t.sizes().vec() : made_[found->second].sizes().vec();
}

ACCEL_DECL std::size_t DeferredBuild::add_made(const torch::Tensor& meta) {
  const std::size_t id = made_.size();
  // An alias, not the tensor itself: the tensor may become a parameter that prepare() adopts a
  // real value into (adopt_value), and the record must keep the meta geometry.
  made_.push_back(meta.detach());
  id_by_storage_[meta.storage().unsafeGetStorageImpl()] = id;
  return id;
}

ACCEL_DECL void DeferredBuild::add_entry(Entry entry) {
  for (auto& value : entry.arguments)
    deferred::for_each_tensor(value, [&](const torch::Tensor& t, auto&& replace) {
      const std::ptrdiff_t id = id_of(t);
      if (id >= 0) replace(made_[id]);
    });
  entries_.push_back(std::move(entry));
}

ACCEL_DECL void DeferredBuild::replay(
    const std::vector<torch::Tensor>& targets,
    const std::function<void(std::size_t, const torch::Tensor&)>& deliver,
    const torch::Tensor& generator_state) const {
  const std::size_t count = made_.size();
  std::vector<std::vector<std::size_t>> target_of(count);
  std::vector<char> needed(count, 0);
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const std::ptrdiff_t id = id_of(targets[k]);
    if (id < 0)
      fail("deferred_init: a tensor of shape [{}] on {} asked of the empty build was not made by "
           "it (an accel bug; please report it)",
           shape_text(targets[k].sizes()), targets[k].device().str());
    target_of[id].push_back(k);
    needed[id] = 1;
  }
  // Backwards: which calls the wanted values need; every random call runs regardless.
  // What a call writes that nothing after it needs (a random call run only to advance the
  // generator: kaiming_uniform_ before GPT's normal_ pass) is dropped right after it.
  std::vector<char> runs(entries_.size(), 0);
  std::vector<std::vector<std::size_t>> dead_after(entries_.size());
  for (std::size_t i = entries_.size(); i-- > 0;) {
    const Entry& e = entries_[i];
    bool wanted = e.random || (e.written >= 0 && needed[e.written] != 0);
    for (const auto& [position, id] : e.outputs) wanted = wanted || needed[id] != 0;
    if (!wanted) continue;
    runs[i] = 1;
    for (const auto& [position, id] : e.outputs)
      if (needed[id] == 0) dead_after[i].push_back(id);
    if (e.written >= 0 && needed[e.written] == 0)
      dead_after[i].push_back(static_cast<std::size_t>(e.written));
    for (const auto& [position, id] : e.outputs) needed[id] = 0;
    if (e.written >= 0 && e.overwrites) needed[e.written] = 0;
    for (const std::size_t r : e.reads) needed[r] = 1;
  }
  std::vector<std::ptrdiff_t> last(count, -1);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (runs[i] == 0) continue;
    const Entry& e = entries_[i];
    for (const auto& [position, id] : e.outputs) last[id] = static_cast<std::ptrdiff_t>(i);
    if (e.written >= 0) last[e.written] = static_cast<std::ptrdiff_t>(i);
    for (const std::size_t r : e.reads) last[r] = static_cast<std::ptrdiff_t>(i);
  }

  auto generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor program_state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    program_state = generator.get_state();
    generator.set_state(generator_state);
  }
  struct PutBack {
    at::Generator& generator;
    const torch::Tensor& state;
    ~PutBack() {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    }
  } put_back{generator, program_state};

  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> live(count);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (runs[i] == 0) continue;
    const Entry& e = entries_[i];
    torch::jit::Stack stack(e.arguments.begin(), e.arguments.end());
    for (auto& value : stack)
      deferred::for_each_tensor(value, [&](const torch::Tensor& t, auto&& replace) {
        const std::ptrdiff_t id = id_of(t);
        if (id < 0) return;
        if (!live[id].defined()) {
          if (id != e.written || !e.overwrites)
            fail("deferred_init: replaying {}: an input was not kept (an accel bug; please "
                 "report it with the model's constructor)",
                 e.op.schema().name());
          live[id] = torch::empty_strided(t.sizes(), t.strides(), t.options().device(torch::kCPU));
        }
        replace(live[id]);
      });
    e.op.callBoxed(&stack);
    const std::size_t returned = e.op.schema().returns().size();
    for (const auto& [position, id] : e.outputs)
      live[id] = stack[stack.size() - returned + position].toTensor();
    auto finish = [&](std::size_t id) {
      if (last[id] != static_cast<std::ptrdiff_t>(i) || !live[id].defined()) return;
      for (const std::size_t k : target_of[id]) deliver(k, live[id]);
      live[id] = torch::Tensor();
    };
    for (const std::size_t id : dead_after[i]) live[id] = torch::Tensor();
    for (const auto& [position, id] : e.outputs) finish(id);
    if (e.written >= 0) finish(static_cast<std::size_t>(e.written));
    for (const std::size_t r : e.reads) finish(r);
  }
}

ACCEL_DECL DeferredScope::DeferredScope(DeferredBuild& build) : previous_(deferred::current()) {
  deferred::register_fallback_once();
  register_unprepared_fallback();
  if (previous_ != nullptr)
    fail("deferred_init: called inside another deferred_init; build the inner model in the "
         "outer one's factory, or one after the other");
  deferred::current() = &build;
  include_ = std::make_unique<c10::impl::IncludeDispatchKeyGuard>(deferred::key);
}

ACCEL_DECL DeferredScope::~DeferredScope() {
  include_.reset();
  deferred::current() = previous_;
}

ACCEL_DECL void remember_deferred_build(const torch::nn::Module& module,
                                        std::shared_ptr<DeferredBuild> build) {
  auto& registry = deferred::registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.builds.emplace_back(&module, std::move(build));
}

ACCEL_DECL std::shared_ptr<DeferredBuild> deferred_build_of(const torch::nn::Module& module) {
  torch::Tensor meta;
  for (const auto& t : module.parameters())
    if (t.is_meta()) meta = t;
  if (!meta.defined())
    for (const auto& t : module.buffers())
      if (t.is_meta()) meta = t;
  if (!meta.defined()) return nullptr;
  auto& registry = deferred::registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const auto& [root, build] : registry.builds)
    if (root == &module || build->id_of(meta) >= 0) return build;
  fail("{} has tensors on the meta device (one of shape [{}]) that accel::deferred_init did not "
       "make, so nothing says what their values are; build the model inside "
       "accel::deferred_init, or on a real device",
       module.name(), shape_text(meta.sizes()));
}

ACCEL_DECL void forget_deferred_build(const torch::nn::Module& module) {
  auto& registry = deferred::registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::erase_if(registry.builds, [&](const auto& entry) { return entry.first == &module; });
}

ACCEL_DECL void adopt_value(const torch::Tensor& target, const torch::Tensor& value) {
  target.unsafeGetTensorImpl()->shallow_copy_from(value.getIntrusivePtr());
}

ACCEL_DECL void materialize_whole(torch::nn::Module& module, const DeferredBuild& build,
                                  const torch::Tensor& generator_state,
                                  const torch::Device& device) {
  std::vector<torch::Tensor> targets;
  auto add = [&](const torch::Tensor& t) {
    if (build.id_of(t) < 0) return;
    for (const auto& known : targets)
      if (known.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return;
    targets.push_back(t);
  };
  for (const auto& p : module.parameters()) add(p);
  for (const auto& b : module.buffers()) add(b);
  build.replay(
      targets,
      [&](std::size_t k, const torch::Tensor& value) {
        adopt_value(targets[k], device.is_cpu() ? value : value.to(device));
      },
      generator_state);
  forget_deferred_build(module);
}

}  // namespace accel::detail
