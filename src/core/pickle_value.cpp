#include "core/pickle_value.h"

#include "core/error.h"

namespace megatron {

const PyValue* PyDict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.kind() == PyValue::Kind::kStr && k.as_str("a key") == key) return &v;
  return nullptr;
}

PyValue* PyDict::find(std::string_view key) {
  return const_cast<PyValue*>(static_cast<const PyDict*>(this)->find(key));
}

void PyDict::set(PyValue key, PyValue value) {
  for (auto& [k, v] : items) {
    if (k.key_equals(key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

PyValue PyValue::boolean(bool v) {
  PyValue p;
  p.kind_ = Kind::kBool;
  p.v_ = v;
  return p;
}
PyValue PyValue::integer(int64_t v) {
  PyValue p;
  p.kind_ = Kind::kInt;
  p.v_ = v;
  return p;
}
PyValue PyValue::real(double v) {
  PyValue p;
  p.kind_ = Kind::kFloat;
  p.v_ = v;
  return p;
}
PyValue PyValue::str(std::string v) {
  PyValue p;
  p.kind_ = Kind::kStr;
  p.v_ = std::move(v);
  return p;
}
PyValue PyValue::bytes(std::string v) {
  PyValue p;
  p.kind_ = Kind::kBytes;
  p.v_ = std::move(v);
  return p;
}
PyValue PyValue::list(std::vector<PyValue> items) {
  PyValue p;
  p.kind_ = Kind::kList;
  p.v_ = std::make_shared<std::vector<PyValue>>(std::move(items));
  return p;
}
PyValue PyValue::tuple(std::vector<PyValue> items) {
  PyValue p = list(std::move(items));
  p.kind_ = Kind::kTuple;
  return p;
}
PyValue PyValue::dict(PyDict::Kind kind) {
  PyValue p;
  p.kind_ = Kind::kDict;
  auto d = std::make_shared<PyDict>();
  d->kind = kind;
  p.v_ = std::move(d);
  return p;
}
PyValue PyValue::global(std::string module, std::string name) {
  PyValue p;
  p.kind_ = Kind::kGlobal;
  p.v_ = PyGlobal{std::move(module), std::move(name)};
  return p;
}
PyValue PyValue::object(PyObject object) {
  PyValue p;
  p.kind_ = Kind::kObject;
  p.v_ = std::make_shared<PyObject>(std::move(object));
  return p;
}
PyValue PyValue::tensor(PyTensor tensor) {
  PyValue p;
  p.kind_ = Kind::kTensor;
  p.v_ = std::make_shared<PyTensor>(std::move(tensor));
  return p;
}
PyValue PyValue::tensor(const Tensor& data) {
  MT_CHECK(data.device().is_cpu(), "a pickled tensor lives on the host");
  PyTensor t;
  t.dtype = data.dtype();
  t.storage_numel = data.numel();
  t.shape = data.shape();
  t.data = data.is_contiguous() ? data : data.clone();
  t.strides = contiguous_strides(t.shape);
  return tensor(std::move(t));
}

PyValue::~PyValue() {
  std::vector<PyValue> pending;
  take_unique_children(pending);
  while (!pending.empty()) {
    PyValue v = std::move(pending.back());
    pending.pop_back();
    v.take_unique_children(pending);
  }  // each `v` is destroyed holding no children: no recursion
}

void PyValue::take_unique_children(std::vector<PyValue>& out) {
  if (auto* list = std::get_if<std::shared_ptr<std::vector<PyValue>>>(&v_)) {
    if (!*list || list->use_count() != 1) return;
    for (PyValue& item : **list) out.push_back(std::move(item));
    (*list)->clear();
  } else if (auto* dict = std::get_if<std::shared_ptr<PyDict>>(&v_)) {
    if (!*dict || dict->use_count() != 1) return;
    for (auto& [key, value] : (*dict)->items) {
      out.push_back(std::move(key));
      out.push_back(std::move(value));
    }
    (*dict)->items.clear();
  } else if (auto* object = std::get_if<std::shared_ptr<PyObject>>(&v_)) {
    if (!*object || object->use_count() != 1) return;
    for (PyValue& arg : (*object)->args) out.push_back(std::move(arg));
    (*object)->args.clear();
    if ((*object)->state && (*object)->state.use_count() == 1)
      out.push_back(std::move(*(*object)->state));
    (*object)->state.reset();
  }
}

std::vector<const PyValue*> PyValue::children() const {
  std::vector<const PyValue*> out;
  if (auto* list = std::get_if<std::shared_ptr<std::vector<PyValue>>>(&v_)) {
    for (const PyValue& item : **list) out.push_back(&item);
  } else if (auto* dict = std::get_if<std::shared_ptr<PyDict>>(&v_)) {
    for (const auto& [key, value] : (*dict)->items) {
      out.push_back(&key);
      out.push_back(&value);
    }
  } else if (auto* object = std::get_if<std::shared_ptr<PyObject>>(&v_)) {
    for (const PyValue& arg : (*object)->args) out.push_back(&arg);
    if ((*object)->state) out.push_back((*object)->state.get());
  }
  return out;
}

const void* PyValue::identity() const {
  if (auto* list = std::get_if<std::shared_ptr<std::vector<PyValue>>>(&v_)) return list->get();
  if (auto* dict = std::get_if<std::shared_ptr<PyDict>>(&v_)) return dict->get();
  if (auto* object = std::get_if<std::shared_ptr<PyObject>>(&v_)) return object->get();
  return nullptr;
}

namespace {
[[noreturn]] void wrong_kind(std::string_view what, const PyValue& v, const char* expected) {
  MT_THROW(what, " is ", v.describe(), ", expected ", expected);
}
}  // namespace

bool PyValue::as_bool(std::string_view what) const {
  if (kind_ != Kind::kBool) wrong_kind(what, *this, "a bool");
  return std::get<bool>(v_);
}
int64_t PyValue::as_int(std::string_view what) const {
  if (kind_ != Kind::kInt) wrong_kind(what, *this, "an int");
  return std::get<int64_t>(v_);
}
double PyValue::as_float(std::string_view what) const {
  if (kind_ == Kind::kInt) return double(std::get<int64_t>(v_));
  if (kind_ != Kind::kFloat) wrong_kind(what, *this, "a float");
  return std::get<double>(v_);
}
const std::string& PyValue::as_str(std::string_view what) const {
  if (kind_ != Kind::kStr) wrong_kind(what, *this, "a str");
  return std::get<std::string>(v_);
}
const std::string& PyValue::as_bytes(std::string_view what) const {
  if (kind_ != Kind::kBytes) wrong_kind(what, *this, "bytes");
  return std::get<std::string>(v_);
}
std::vector<PyValue>& PyValue::as_sequence(std::string_view what) const {
  if (kind_ != Kind::kList && kind_ != Kind::kTuple) wrong_kind(what, *this, "a list or tuple");
  return *std::get<std::shared_ptr<std::vector<PyValue>>>(v_);
}
PyDict& PyValue::as_dict(std::string_view what) const {
  if (kind_ != Kind::kDict) wrong_kind(what, *this, "a dict");
  return *std::get<std::shared_ptr<PyDict>>(v_);
}
const PyGlobal& PyValue::as_global(std::string_view what) const {
  if (kind_ != Kind::kGlobal) wrong_kind(what, *this, "a global name");
  return std::get<PyGlobal>(v_);
}
PyObject& PyValue::as_object(std::string_view what) const {
  if (kind_ != Kind::kObject) wrong_kind(what, *this, "an object");
  return *std::get<std::shared_ptr<PyObject>>(v_);
}
PyTensor& PyValue::as_tensor(std::string_view what) const {
  if (kind_ != Kind::kTensor) wrong_kind(what, *this, "a tensor");
  return *std::get<std::shared_ptr<PyTensor>>(v_);
}

std::string PyValue::describe() const {
  switch (kind_) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return std::get<bool>(v_) ? "True" : "False";
    case Kind::kInt:
      return "the int " + std::to_string(std::get<int64_t>(v_));
    case Kind::kFloat:
      return "a float";
    case Kind::kStr:
      return "the str '" + std::get<std::string>(v_) + "'";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "a list";
    case Kind::kTuple:
      return "a tuple";
    case Kind::kDict: {
      const PyDict::Kind k = std::get<std::shared_ptr<PyDict>>(v_)->kind;
      return k == PyDict::Kind::kNamespace     ? "an argparse.Namespace"
             : k == PyDict::Kind::kOrderedDict ? "an OrderedDict"
                                               : "a dict";
    }
    case Kind::kGlobal:
      return "the global " + std::get<PyGlobal>(v_).qualified();
    case Kind::kObject:
      return "a " + std::get<std::shared_ptr<PyObject>>(v_)->type.qualified() + " object";
    case Kind::kTensor: {
      const PyTensor& t = *std::get<std::shared_ptr<PyTensor>>(v_);
      return "a " + std::string(dtype_name(t.dtype)) + " tensor " + shape_str(t.shape);
    }
  }
  return "?";
}

bool PyValue::key_equals(const PyValue& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return std::get<bool>(v_) == std::get<bool>(other.v_);
    case Kind::kInt:
      return std::get<int64_t>(v_) == std::get<int64_t>(other.v_);
    case Kind::kFloat:
      return std::get<double>(v_) == std::get<double>(other.v_);
    case Kind::kStr:
    case Kind::kBytes:
      return std::get<std::string>(v_) == std::get<std::string>(other.v_);
    case Kind::kGlobal:
      return std::get<PyGlobal>(v_) == std::get<PyGlobal>(other.v_);
    default:
      return v_ == other.v_;  // containers and tensors: the same object
  }
}

}  // namespace megatron
