// PyValue: the Python objects a PyTorch checkpoint's pickle holds, as data. Nothing here runs
// Python: the reader (core/pickle_reader.h) builds these from an allow-list of globals, the
// writer (core/pickle_writer.h) turns them back into a pickle.
//
//   None, bool, int (64-bit), float, str (UTF-8), bytes
//   list, tuple                       shared vector of values
//   dict, OrderedDict, Namespace      shared, insertion-ordered (key, value) pairs; a Namespace
//                                     (argparse.Namespace, Megatron's `args`) holds its
//                                     attributes with str keys
//   global                            a module-level name the allow-list admits as a value:
//                                     a dtype (torch.bfloat16), a storage type, ...
//   object                            an allowed class called with args, then given a state
//                                     (numpy arrays in RNG states, enums): kept, not interpreted
//   tensor                            torch._utils._rebuild_tensor_v2: dtype, shape, strides,
//                                     offset, storage key; its data once the file is read
// Containers are shared (the pickle's memo may refer to one object twice), so a copy of a
// PyValue aliases the same list or dict.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace megatron {

class PyValue;

struct PyGlobal {
  std::string module, name;
  std::string qualified() const { return module + "." + name; }
  bool operator==(const PyGlobal&) const = default;
};

struct PyDict {
  enum class Kind { kDict, kOrderedDict, kNamespace };
  Kind kind = Kind::kDict;
  std::vector<std::pair<PyValue, PyValue>> items;
  // The value under the str key `key`, or nullptr.
  const PyValue* find(std::string_view key) const;
  PyValue* find(std::string_view key);
  // Replaces the value under an equal key, else appends (Python's d[k] = v).
  void set(PyValue key, PyValue value);
};

struct PyObject {
  PyGlobal type;
  std::vector<PyValue> args;
  std::shared_ptr<PyValue> state;  // BUILD's argument, or null
  // Made by NEWOBJ (cls.__new__(cls, *args), how pickle rebuilds a dataclass instance) rather
  // than by REDUCE (a call of type(*args), how it rebuilds an enum member).
  bool new_object = false;
};

// A tensor as _rebuild_tensor_v2 describes it: a view (offset, shape, strides in elements) of
// the storage `storage_key` (record data/<key>) of `storage_numel` elements of `dtype`.
struct PyTensor {
  DType dtype = DType::F32;
  std::string storage_key, location = "cpu";
  int64_t storage_numel = 0, offset = 0;
  Shape shape, strides;
  bool requires_grad = false;
  Tensor data;  // the view itself, once the storage is read (torch_load) or to write (torch_save)
};

class PyValue {
 public:
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kBytes,
    kList,
    kTuple,
    kDict,
    kGlobal,
    kObject,
    kTensor
  };

  PyValue() = default;  // None
  PyValue(const PyValue&) = default;
  PyValue(PyValue&&) noexcept = default;
  // The old value leaves through the destructor (by value: copy and move assignment alike).
  PyValue& operator=(PyValue other) noexcept {
    std::swap(kind_, other.kind_);
    v_.swap(other.v_);
    return *this;
  }
  // Takes nested containers apart with a work list, not by recursion, so that a pickle nested
  // deeper than the call stack cannot overflow it while being released.
  ~PyValue();
  static PyValue boolean(bool v);
  static PyValue integer(int64_t v);
  static PyValue real(double v);
  static PyValue str(std::string v);
  static PyValue bytes(std::string v);
  static PyValue list(std::vector<PyValue> items = {});
  static PyValue tuple(std::vector<PyValue> items = {});
  static PyValue dict(PyDict::Kind kind = PyDict::Kind::kDict);
  static PyValue global(std::string module, std::string name);
  static PyValue object(PyObject object);
  static PyValue tensor(PyTensor tensor);
  // A contiguous tensor holding `data` (a dense CPU tensor), stored in its own storage.
  static PyValue tensor(const Tensor& data);

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  // Accessors throw Error naming `what` (e.g. "checkpoint key 'iteration'") when the value is
  // of another kind.
  bool as_bool(std::string_view what) const;
  int64_t as_int(std::string_view what) const;
  double as_float(std::string_view what) const;  // an int reads as a float, as in Python
  const std::string& as_str(std::string_view what) const;
  const std::string& as_bytes(std::string_view what) const;
  std::vector<PyValue>& as_sequence(std::string_view what) const;  // a list or a tuple
  PyDict& as_dict(std::string_view what) const;                    // dict, OrderedDict or Namespace
  const PyGlobal& as_global(std::string_view what) const;
  PyObject& as_object(std::string_view what) const;
  PyTensor& as_tensor(std::string_view what) const;

  // "an int", "a dict", "the global torch.bfloat16", ... for messages.
  std::string describe() const;
  // Python's == on keys: same kind and value (containers by identity).
  bool key_equals(const PyValue& other) const;
  // The values a container holds directly (items; keys and values; args and state), in order;
  // none for the others.
  std::vector<const PyValue*> children() const;
  // The shared object a container is (two copies of one list have the same identity), or
  // nullptr for the other kinds.
  const void* identity() const;

 private:
  // Moves the children of a container this value is the last owner of into `out`.
  void take_unique_children(std::vector<PyValue>& out);

  Kind kind_ = Kind::kNone;
  std::variant<std::monostate, bool, int64_t, double, std::string, PyGlobal,
               std::shared_ptr<std::vector<PyValue>>, std::shared_ptr<PyDict>,
               std::shared_ptr<PyObject>, std::shared_ptr<PyTensor>>
      v_;
};

}  // namespace megatron
