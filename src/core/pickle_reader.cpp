#include "core/pickle_reader.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "core/error.h"

namespace megatron {

namespace {

// What an allowed global is to the reader.
enum class Role {
  kValue,          // a constant pushed as a PyGlobal (dtypes); not callable
  kStorageType,    // torch.<X>Storage: only inside persistent ids
  kOrderedDict,    // collections.OrderedDict
  kNamespace,      // argparse.Namespace
  kRebuildTensor,  // torch._utils._rebuild_tensor_v2
  kRebuildParameter,
  kCodecsEncode,  // _codecs.encode(str, "latin1"): how protocol 2 spells bytes
  kTorchSize,     // torch.Size((d0, d1, ...)) -> the tuple of its dimensions
  kObject,        // recorded as a PyObject (numpy reconstruction, enums), never called
  kGetattr,       // getattr(an allowed kObject class, "member"): how Python >= 3.11 pickles
                  // an enum member; recorded as a PyObject, never called
};

const std::map<std::string, Role>& allow_list() {
  static const std::map<std::string, Role> list = [] {
    std::map<std::string, Role> l = {
        {"collections.OrderedDict", Role::kOrderedDict},
        {"argparse.Namespace", Role::kNamespace},
        {"torch._utils._rebuild_tensor_v2", Role::kRebuildTensor},
        {"torch._utils._rebuild_parameter", Role::kRebuildParameter},
        {"_codecs.encode", Role::kCodecsEncode},
        {"builtins.getattr", Role::kGetattr},
        {"__builtin__.getattr", Role::kGetattr},  // protocol 2's name for it
    };
    for (const char* s : {"Float", "Double", "Half", "BFloat16", "Long", "Int", "Byte"})
      l[std::string("torch.") + s + "Storage"] = Role::kStorageType;
    for (const char* d : {"float32", "float", "float64", "double", "float16", "half", "bfloat16",
                          "int64", "long", "int32", "int", "uint8", "int8", "int16", "bool"})
      l[std::string("torch.") + d] = Role::kValue;
    // NumPy arrays and scalars (the NumPy generator state in Megatron's rng_state).
    for (const char* m : {"numpy.core.multiarray", "numpy._core.multiarray"}) {
      l[std::string(m) + "._reconstruct"] = Role::kObject;
      l[std::string(m) + ".scalar"] = Role::kObject;
    }
    l["numpy.ndarray"] = Role::kObject;
    // Transformer Engine's _extra_state before it became a byte tensor: a BytesIO holding a
    // torch.save of its FP8 metadata (never opened here).
    l["_io.BytesIO"] = Role::kObject;
    l["numpy.dtype"] = Role::kObject;
    l["torch.Size"] = Role::kTorchSize;
    // PyTorch Distributed Checkpoint's `.metadata` (checkpoint/torch_dcp.h): its dataclasses
    // (PyTorch 2.x's modules, and 1.13-2.1's torch.distributed._shard ones), the storage
    // records of its file system writer, Megatron-Core's Metadata subclass (mcore 0.15), a
    // tensor layout as torch pickles it (_get_layout("torch.strided")) and the PosixPath of
    // the writer's checkpoint directory (StorageMeta.checkpoint_id): records, never called.
    for (const char* m : {"torch.distributed.checkpoint.metadata.",
                          "torch.distributed._shard.checkpoint.metadata."})
      for (const char* c : {"Metadata", "TensorStorageMetadata", "ChunkStorageMetadata",
                            "BytesStorageMetadata", "MetadataIndex"})
        l[std::string(m) + c] = Role::kObject;
    for (const char* e :
         {"torch.distributed.checkpoint.metadata.TensorProperties",
          "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
          "torch.distributed.checkpoint.metadata.StorageMeta",
          "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
          "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
          "torch.distributed.checkpoint.filesystem._StorageInfo",
          "torch.distributed._shard.checkpoint.filesystem._StorageInfo",
          "megatron.core.dist_checkpointing.strategies.torch.MCoreMetadata",
          "torch.serialization._get_layout", "pathlib.PosixPath", "pathlib._local.PosixPath"})
      l[e] = Role::kObject;
    // Megatron-Core's enums that its arguments hold (pickled as Enum(value)).
    for (const char* e :
         {"megatron.core.transformer.enums.AttnBackend",
          "megatron.core.transformer.enums.AttnMaskType",
          "megatron.core.transformer.enums.AttnType",
          "megatron.core.transformer.enums.CudaGraphModule",
          "megatron.core.transformer.enums.InferenceCudaGraphScope",
          "megatron.core.transformer.enums.LayerType", "megatron.core.enums.ModelType",
          "megatron.legacy.model.enums.AttnMaskType", "megatron.legacy.model.enums.AttnType",
          "megatron.legacy.model.enums.LayerType"})
      l[e] = Role::kObject;
    return l;
  }();
  return list;
}

std::optional<DType> storage_dtype(const std::string& name) {
  static const std::map<std::string, DType> types = {
      {"FloatStorage", DType::F32},     {"DoubleStorage", DType::F64}, {"HalfStorage", DType::F16},
      {"BFloat16Storage", DType::BF16}, {"LongStorage", DType::I64},   {"IntStorage", DType::I32},
      {"ByteStorage", DType::U8}};
  auto it = types.find(name);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& source) : b_(bytes), source_(source) {}

  PyValue run() {
    for (;;) {
      op_at_ = pos_;
      const uint8_t op = u8();
      if (step(op)) break;
    }
    if (stack_.size() != 1 || !marks_.empty()) fail("the stream ends with a malformed stack");
    return stack_.back();
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... what) const {
    MT_THROW("pickle ", source_, ": ", what..., " (at byte ", op_at_,
             "); the file is corrupt or not a PyTorch checkpoint");
  }

  // ---- input ----
  const uint8_t* take(size_t n) {
    if (n > b_.size() - pos_) fail("the stream ends inside an opcode (truncated)");
    const uint8_t* p = reinterpret_cast<const uint8_t*>(b_.data()) + pos_;
    pos_ += n;
    return p;
  }
  uint8_t u8() { return *take(1); }
  uint64_t le(size_t n) {
    const uint8_t* p = take(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
  }
  std::string text(size_t n) {
    const uint8_t* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), n);
  }
  std::string line() {
    const size_t end = b_.find('\n', pos_);
    if (end == std::string_view::npos) fail("the stream ends inside a GLOBAL name (truncated)");
    std::string s(b_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  // A length-prefixed payload, its length checked against what is left before allocating.
  std::string sized(size_t length_bytes) {
    const uint64_t n = le(length_bytes);
    if (n > b_.size() - pos_) fail("a ", n, "-byte string runs past the end (truncated)");
    return text(size_t(n));
  }
  // Little-endian two's complement of n bytes (LONG1/LONG4).
  int64_t long_int(size_t n) {
    if (n > 8) fail("an integer of ", n, " bytes, larger than 64 bits");
    if (n == 0) return 0;
    const uint64_t v = le(n);
    if (n == 8) return int64_t(v);
    const uint64_t sign = uint64_t(1) << (8 * n - 1);
    return int64_t((v ^ sign) - sign);
  }

  // ---- stack ----
  PyValue pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      fail("an opcode pops an empty stack");
    PyValue v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  PyValue& top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      fail("an opcode reads an empty stack");
    return stack_.back();
  }
  std::vector<PyValue> pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK that is not there");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyValue> items(std::make_move_iterator(stack_.begin() + long(m)),
                               std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  void memo_put(uint64_t index) {
    if (index > b_.size()) fail("memo index ", index, " out of range");
    if (memo_.size() <= index) memo_.resize(size_t(index) + 1);
    memo_[size_t(index)] = top();
  }
  void memo_get(uint64_t index) {
    if (index >= memo_.size() || !memo_[size_t(index)])
      fail("memo index ", index, " was never stored");
    stack_.push_back(*memo_[size_t(index)]);
  }

  Role role_of(const PyGlobal& g) const { return allow_list().at(g.qualified()); }

  void push_global(std::string module, std::string name) {
    if (!pickle_global_allowed(module, name)) {
      MT_THROW("pickle ", source_, " names the global ", module, ".", name, " (at byte ", op_at_,
               "), which PyTorch checkpoints of Megatron-LM models never hold: refusing to load "
               "it. A pickle is a program that can run any such name; only the types these "
               "checkpoints are made of are read (core/pickle_reader.h lists them)");
    }
    stack_.push_back(PyValue::global(std::move(module), std::move(name)));
  }

  // ---- calls of allowed globals ----
  PyValue reduce(const PyValue& callable, const std::vector<PyValue>& args) {
    if (callable.kind() != PyValue::Kind::kGlobal) fail("REDUCE calls ", callable.describe());
    const PyGlobal& g = callable.as_global("the callable");
    switch (role_of(g)) {
      case Role::kOrderedDict: {
        PyValue d = PyValue::dict(PyDict::Kind::kOrderedDict);
        if (args.size() == 1) {
          for (const PyValue& pair : args[0].as_sequence("OrderedDict's argument")) {
            const auto& kv = pair.as_sequence("an OrderedDict item");
            if (kv.size() != 2) fail("an OrderedDict item is not a pair");
            d.as_dict("").set(kv[0], kv[1]);
          }
        } else if (!args.empty()) {
          fail("OrderedDict called with ", args.size(), " arguments");
        }
        return d;
      }
      case Role::kNamespace:
        if (!args.empty()) fail("argparse.Namespace called with positional arguments");
        return PyValue::dict(PyDict::Kind::kNamespace);
      case Role::kRebuildTensor:
        return rebuild_tensor(args);
      case Role::kRebuildParameter: {
        if (args.size() != 3) fail("_rebuild_parameter called with ", args.size(), " arguments");
        args[0].as_tensor("_rebuild_parameter's data").requires_grad =
            args[1].as_bool("requires_grad");
        return args[0];
      }
      case Role::kCodecsEncode: {
        if (args.size() != 2) fail("_codecs.encode called with ", args.size(), " arguments");
        const std::string& enc = args[1].as_str("_codecs.encode's encoding");
        if (enc != "latin1" && enc != "latin-1") fail("_codecs.encode with encoding ", enc);
        return PyValue::bytes(latin1_bytes(args[0].as_str("_codecs.encode's text")));
      }
      case Role::kTorchSize: {
        if (args.size() != 1) fail("torch.Size called with ", args.size(), " arguments");
        std::vector<PyValue> dims;
        for (const PyValue& d : args[0].as_sequence("torch.Size's argument")) {
          if (d.kind() != PyValue::Kind::kInt) fail("torch.Size of ", d.describe());
          dims.push_back(d);
        }
        return PyValue::tuple(std::move(dims));
      }
      case Role::kObject:
        return PyValue::object(PyObject{g, args, nullptr});
      case Role::kGetattr:
        if (args.size() != 2 || args[0].kind() != PyValue::Kind::kGlobal ||
            role_of(args[0].as_global("")) != Role::kObject ||
            args[1].kind() != PyValue::Kind::kStr)
          fail("getattr of ", args.empty() ? std::string("nothing") : args[0].describe(),
               ": only a member of an allowed enum class is read");
        return PyValue::object(PyObject{g, args, nullptr});
      case Role::kValue:
      case Role::kStorageType:
        break;
    }
    fail(g.qualified(), " is called, which only ever appears as a value");
  }

  // UTF-8 text whose code points are all < 256 → the bytes they stand for.
  std::string latin1_bytes(const std::string& utf8) {
    std::string out;
    for (size_t i = 0; i < utf8.size(); ++i) {
      const auto c = uint8_t(utf8[i]);
      if (c < 0x80) {
        out.push_back(char(c));
      } else if ((c & 0xE0) == 0xC0 && c <= 0xC3 && i + 1 < utf8.size()) {
        out.push_back(char(((c & 0x03) << 6) | (uint8_t(utf8[++i]) & 0x3F)));
      } else {
        fail("_codecs.encode of text outside latin-1");
      }
    }
    return out;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[,
  // metadata]) with `storage` a persistent id's storage record.
  PyValue rebuild_tensor(const std::vector<PyValue>& args) {
    if (args.size() != 6 && args.size() != 7)
      fail("_rebuild_tensor_v2 called with ", args.size(), " arguments");
    const PyObject& storage = args[0].as_object("_rebuild_tensor_v2's storage");
    if (role_of(storage.type) != Role::kStorageType || storage.args.size() != 3)
      fail("_rebuild_tensor_v2 of ", args[0].describe(), ", not a storage");
    PyTensor t;
    t.dtype = *storage_dtype(storage.type.name);
    t.storage_key = storage.args[0].as_str("a storage key");
    t.location = storage.args[1].as_str("a storage location");
    t.storage_numel = storage.args[2].as_int("a storage size");
    t.offset = args[1].as_int("a tensor's storage offset");
    for (const PyValue& v : args[2].as_sequence("a tensor's size"))
      t.shape.push_back(v.as_int("a dimension"));
    for (const PyValue& v : args[3].as_sequence("a tensor's stride"))
      t.strides.push_back(v.as_int("a stride"));
    t.requires_grad = args[4].as_bool("requires_grad");
    if (t.shape.size() != t.strides.size()) fail("a tensor's size and stride differ in length");
    int64_t last = t.offset;  // the largest element index the view touches
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0 || t.strides[d] < 0) fail("a negative tensor size or stride");
      if (t.shape[d] == 0) last = -1;
      if (last >= 0) last += (t.shape[d] - 1) * t.strides[d];
    }
    if (t.offset < 0 || t.storage_numel < 0 || last >= t.storage_numel)
      fail("a tensor ", shape_str(t.shape), " at offset ", t.offset, " runs past its storage of ",
           t.storage_numel, " elements");
    return PyValue::tensor(std::move(t));
  }

  // A persistent id: ("storage", storage type, key, location, numel) → a storage record.
  PyValue persistent_load(const PyValue& pid) {
    const auto& f = pid.as_sequence("a persistent id");
    if (f.size() != 5 || f[0].kind() != PyValue::Kind::kStr || f[0].as_str("") != "storage")
      fail("a persistent id that is not a ('storage', type, key, location, size) tuple");
    const PyGlobal& type = f[1].as_global("a storage type");
    if (role_of(type) != Role::kStorageType || !storage_dtype(type.name))
      fail("a persistent id of ", type.qualified(), ", which is not a storage type");
    return PyValue::object(PyObject{type, {f[2], f[3], f[4]}, nullptr});
  }

  PyValue construct(const PyValue& cls, const std::vector<PyValue>& args) {
    if (cls.kind() == PyValue::Kind::kGlobal) {
      const PyGlobal& g = cls.as_global("");
      if (role_of(g) == Role::kNamespace) return PyValue::dict(PyDict::Kind::kNamespace);
      if (role_of(g) == Role::kObject) return PyValue::object(PyObject{g, args, nullptr, true});
    }
    fail("NEWOBJ constructs ", cls.describe());
  }

  void build(PyValue& target, const PyValue& state) {
    if (target.kind() == PyValue::Kind::kDict) {
      PyDict& d = target.as_dict("");
      if (d.kind == PyDict::Kind::kNamespace) {
        for (const auto& [k, v] : state.as_dict("a Namespace's state").items) d.set(k, v);
      }
      // A dict subclass's instance attributes (a state_dict's `_metadata` versions) are not
      // items; they are dropped.
      return;
    }
    if (target.kind() == PyValue::Kind::kObject) {
      target.as_object("").state = std::make_shared<PyValue>(state);
      return;
    }
    fail("BUILD sets the state of ", target.describe());
  }

  // Executes one opcode; true at STOP.
  bool step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = u8();
        if (v > 5) fail("pickle protocol ", int(v), " (newer than 5)");
        return false;
      }
      case 0x95:
        le(8);
        return false;  // FRAME: a length hint
      case '.':
        return true;  // STOP
      case '(':
        marks_.push_back(stack_.size());
        return false;
      case '0':
        pop();
        return false;
      case '1':
        pop_mark();
        return false;
      case '2':
        stack_.push_back(top());
        return false;
      case 'N':
        stack_.emplace_back();
        return false;
      case 0x88:
        stack_.push_back(PyValue::boolean(true));
        return false;
      case 0x89:
        stack_.push_back(PyValue::boolean(false));
        return false;
      case 'J':
        stack_.push_back(PyValue::integer(int32_t(uint32_t(le(4)))));
        return false;
      case 'K':
        stack_.push_back(PyValue::integer(u8()));
        return false;
      case 'M':
        stack_.push_back(PyValue::integer(int64_t(le(2))));
        return false;
      case 0x8a:
        stack_.push_back(PyValue::integer(long_int(u8())));
        return false;
      case 0x8b:
        stack_.push_back(PyValue::integer(long_int(size_t(le(4)))));
        return false;
      case 'G': {  // BINFLOAT: big-endian IEEE double
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        double d;
        std::memcpy(&d, &bits, 8);
        stack_.push_back(PyValue::real(d));
        return false;
      }
      case 'X':
        stack_.push_back(PyValue::str(sized(4)));
        return false;
      case 0x8c:
        stack_.push_back(PyValue::str(sized(1)));
        return false;
      case 0x8d:
        stack_.push_back(PyValue::str(sized(8)));
        return false;
      case 'T':
        stack_.push_back(PyValue::str(sized(4)));
        return false;  // Python 2 str
      case 'U':
        stack_.push_back(PyValue::str(sized(1)));
        return false;
      case 'B':
        stack_.push_back(PyValue::bytes(sized(4)));
        return false;
      case 'C':
        stack_.push_back(PyValue::bytes(sized(1)));
        return false;
      case 0x8e:
        stack_.push_back(PyValue::bytes(sized(8)));
        return false;
      case 0x96:
        stack_.push_back(PyValue::bytes(sized(8)));
        return false;  // BYTEARRAY8
      case ']':
        stack_.push_back(PyValue::list());
        return false;
      case 'l':
        stack_.push_back(PyValue::list(pop_mark()));
        return false;
      case 'a': {
        PyValue v = pop();
        top().as_sequence("APPEND's target").push_back(std::move(v));
        return false;
      }
      case 'e': {
        std::vector<PyValue> items = pop_mark();
        auto& list = top().as_sequence("APPENDS's target");
        for (PyValue& v : items) list.push_back(std::move(v));
        return false;
      }
      case ')':
        stack_.push_back(PyValue::tuple());
        return false;
      case 't':
        stack_.push_back(PyValue::tuple(pop_mark()));
        return false;
      case 0x85:
      case 0x86:
      case 0x87: {
        std::vector<PyValue> items(size_t(op - 0x84));
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        stack_.push_back(PyValue::tuple(std::move(items)));
        return false;
      }
      case '}':
        stack_.push_back(PyValue::dict());
        return false;
      case 'd':
      case 'u': {
        std::vector<PyValue> items = pop_mark();
        if (items.size() % 2) fail("a dict's items are not key-value pairs");
        if (op == 'd') stack_.push_back(PyValue::dict());
        PyDict& d = top().as_dict("SETITEMS's target");
        for (size_t i = 0; i < items.size(); i += 2) d.set(items[i], items[i + 1]);
        return false;
      }
      case 's': {
        PyValue v = pop();
        PyValue k = pop();
        top().as_dict("SETITEM's target").set(std::move(k), std::move(v));
        return false;
      }
      case 'c': {
        std::string module = line();
        std::string name = line();
        push_global(std::move(module), std::move(name));
        return false;
      }
      case 0x93: {  // STACK_GLOBAL
        PyValue name = pop();
        PyValue module = pop();
        push_global(module.as_str("STACK_GLOBAL's module"), name.as_str("STACK_GLOBAL's name"));
        return false;
      }
      case 'R': {
        PyValue args = pop();
        PyValue callable = pop();
        stack_.push_back(reduce(callable, args.as_sequence("REDUCE's arguments")));
        return false;
      }
      case 0x81: {  // NEWOBJ
        PyValue args = pop();
        PyValue cls = pop();
        stack_.push_back(construct(cls, args.as_sequence("NEWOBJ's arguments")));
        return false;
      }
      case 0x92: {  // NEWOBJ_EX
        PyValue kwargs = pop();
        PyValue args = pop();
        PyValue cls = pop();
        if (!kwargs.as_dict("NEWOBJ_EX's keyword arguments").items.empty())
          fail("NEWOBJ_EX with keyword arguments");
        stack_.push_back(construct(cls, args.as_sequence("NEWOBJ_EX's arguments")));
        return false;
      }
      case 'b': {
        PyValue state = pop();
        build(top(), state);
        return false;
      }
      case 'Q': {
        PyValue pid = pop();
        stack_.push_back(persistent_load(pid));
        return false;
      }
      case 'q':
        memo_put(u8());
        return false;
      case 'r':
        memo_put(le(4));
        return false;
      case 0x94:
        memo_put(memo_.size());
        return false;  // MEMOIZE
      case 'h':
        memo_get(u8());
        return false;
      case 'j':
        memo_get(le(4));
        return false;
      case 0x8f:
      case 0x90:
      case 0x91:
        fail("a set or frozenset, which PyTorch checkpoints do not hold");
      case 0x82:
      case 0x83:
      case 0x84:
        fail("an extension-registry code (EXT1/2/4), which is not supported");
      case 'i':
      case 'o':
        fail("an INST/OBJ opcode (class instantiation by name), which is refused");
      case 'P':
        fail("a text persistent id, which torch.save never writes");
      case 'I':
      case 'L':
      case 'F':
      case 'S':
      case 'V':
      case 'p':
      case 'g':
        fail("a protocol-0 text opcode '", char(op), "', which torch.save never writes");
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        fail("unknown opcode ", hex);
      }
    }
  }

  std::string_view b_;
  const std::string& source_;
  size_t pos_ = 0, op_at_ = 0;
  std::vector<PyValue> stack_;
  std::vector<size_t> marks_;
  std::vector<std::optional<PyValue>> memo_;
};

// Whoever reads the result recurses into it (for_each_tensor, the converters): refuses a
// value that nests containers more than kMaxDepth deep (PyTorch checkpoints nest a handful) or
// that contains itself. One pass, each container once: its height is kept for later visits.
void check_nesting(const PyValue& root, const std::string& source) {
  constexpr size_t kMaxDepth = 1000;
  std::unordered_map<const void*, size_t> height;  // 0: on the current path
  struct Frame {
    const PyValue* value;
    std::vector<const PyValue*> children;
    size_t next = 0, height = 1;
  };
  std::vector<Frame> path;
  // Enters `v` below the current path: pushes it, or accounts for a container seen before.
  auto enter = [&](const PyValue& v) {
    const void* id = v.identity();
    if (!id) return;
    auto [it, fresh] = height.try_emplace(id, 0);
    if (fresh) {
      MT_REQUIRE(path.size() < kMaxDepth, "pickle ", source, " nests containers more than ",
                 kMaxDepth, " deep, which PyTorch checkpoints never do");
      path.push_back({&v, v.children()});
      return;
    }
    MT_REQUIRE(it->second != 0, "pickle ", source,
               " holds a container that contains itself, which PyTorch checkpoints never do");
    MT_REQUIRE(path.size() + it->second <= kMaxDepth, "pickle ", source,
               " nests containers more than ", kMaxDepth,
               " deep, which PyTorch checkpoints never do");
    path.back().height = std::max(path.back().height, it->second + 1);
  };
  enter(root);
  while (!path.empty()) {
    Frame& f = path.back();
    if (f.next < f.children.size()) {
      enter(*f.children[f.next++]);  // may grow `path`: `f` is not used after
      continue;
    }
    const size_t h = f.height;
    height[f.value->identity()] = h;
    path.pop_back();
    if (!path.empty()) path.back().height = std::max(path.back().height, h + 1);
  }
}

}  // namespace

bool pickle_global_allowed(const std::string& module, const std::string& name) {
  return allow_list().count(module + "." + name) != 0;
}

PyValue read_pickle(std::string_view bytes, const std::string& source) {
  PyValue root = Reader(bytes, source).run();
  check_nesting(root, source);
  return root;
}

}  // namespace megatron
