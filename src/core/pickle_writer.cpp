#include "core/pickle_writer.h"

#include <cstring>

#include "core/error.h"

namespace megatron {

namespace {

// The torch storage class of a dtype ("FloatStorage", "BFloat16Storage", ...).
const char* torch_storage_type_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "FloatStorage";
    case DType::F64:
      return "DoubleStorage";
    case DType::F16:
      return "HalfStorage";
    case DType::BF16:
      return "BFloat16Storage";
    case DType::I64:
      return "LongStorage";
    case DType::I32:
      return "IntStorage";
    case DType::U8:
      return "ByteStorage";
  }
  MT_THROW("no torch storage type for dtype ", dtype_name(dtype));
}

class Writer {
 public:
  std::string finish(const PyValue& v) {
    out_ += "\x80\x02";  // PROTO 2
    value(v);
    out_ += '.';
    return std::move(out_);
  }

 private:
  void le(uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) out_.push_back(char((v >> (8 * i)) & 0xFF));
  }
  void global(const std::string& module, const std::string& name) {
    out_ += 'c';
    out_ += module + "\n" + name + "\n";
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      le(uint64_t(v), 1);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      le(uint64_t(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      le(uint64_t(uint32_t(int32_t(v))), 4);
    } else {  // LONG1: the shortest little-endian two's complement
      size_t n = 8;
      while (n > 1) {
        const int64_t shifted = v >> (8 * (n - 1) - 1);
        if (shifted != 0 && shifted != -1) break;
        --n;
      }
      out_ += '\x8a';
      le(n, 1);
      le(uint64_t(v), n);
    }
  }
  void str(const std::string& s) {
    out_ += 'X';
    le(s.size(), 4);
    out_ += s;
  }
  // Protocol 2 has no bytes opcode: Python writes _codecs.encode(latin-1 text, "latin1").
  void bytes(const std::string& b) {
    global("_codecs", "encode");
    std::string text;
    for (unsigned char c : b) {
      if (c < 0x80) {
        text.push_back(char(c));
      } else {
        text.push_back(char(0xC0 | (c >> 6)));
        text.push_back(char(0x80 | (c & 0x3F)));
      }
    }
    str(text);
    str("latin1");
    out_ += '\x86';  // TUPLE2
    out_ += 'R';
  }
  void tuple(const std::vector<PyValue>& items) {
    if (items.empty()) {
      out_ += ')';
      return;
    }
    if (items.size() > 3) out_ += '(';
    for (const PyValue& v : items) value(v);
    out_ += items.size() > 3 ? 't' : char(0x84 + items.size());
  }
  void dict_items(const PyDict& d) {
    if (d.items.empty()) return;
    out_ += '(';
    for (const auto& [k, v] : d.items) {
      value(k);
      value(v);
    }
    out_ += 'u';  // SETITEMS
  }
  void tensor(const PyTensor& t) {
    global("torch._utils", "_rebuild_tensor_v2");
    out_ += '(';
    out_ += '(';
    str("storage");
    global("torch", torch_storage_type_name(t.dtype));
    str(t.storage_key);
    str(t.location);
    integer(t.storage_numel);
    out_ += 't';
    out_ += 'Q';  // BINPERSID
    integer(t.offset);
    std::vector<PyValue> size, stride;
    for (int64_t s : t.shape) size.push_back(PyValue::integer(s));
    for (int64_t s : t.strides) stride.push_back(PyValue::integer(s));
    tuple(size);
    tuple(stride);
    out_ += t.requires_grad ? '\x88' : '\x89';
    global("collections", "OrderedDict");  // backward hooks: an empty OrderedDict
    out_ += ")R";
    out_ += 't';
    out_ += 'R';
  }

  void value(const PyValue& v) {
    switch (v.kind()) {
      case PyValue::Kind::kNone:
        out_ += 'N';
        return;
      case PyValue::Kind::kBool:
        out_ += v.as_bool("") ? '\x88' : '\x89';
        return;
      case PyValue::Kind::kInt:
        integer(v.as_int(""));
        return;
      case PyValue::Kind::kFloat: {
        const double d = v.as_float("");
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        out_ += 'G';
        for (int i = 7; i >= 0; --i) out_.push_back(char((bits >> (8 * i)) & 0xFF));
        return;
      }
      case PyValue::Kind::kStr:
        str(v.as_str(""));
        return;
      case PyValue::Kind::kBytes:
        bytes(v.as_bytes(""));
        return;
      case PyValue::Kind::kList: {
        out_ += ']';
        const auto& items = v.as_sequence("");
        if (items.empty()) return;
        out_ += '(';
        for (const PyValue& item : items) value(item);
        out_ += 'e';  // APPENDS
        return;
      }
      case PyValue::Kind::kTuple:
        tuple(v.as_sequence(""));
        return;
      case PyValue::Kind::kDict: {
        const PyDict& d = v.as_dict("");
        if (d.kind == PyDict::Kind::kNamespace) {
          global("argparse", "Namespace");
          out_ += ")\x81}";  // NEWOBJ with no arguments, then its __dict__ ...
          dict_items(d);
          out_ += 'b';  // ... set by BUILD
        } else if (d.kind == PyDict::Kind::kOrderedDict) {
          global("collections", "OrderedDict");
          out_ += ")R";
          dict_items(d);
        } else {
          out_ += '}';
          dict_items(d);
        }
        return;
      }
      case PyValue::Kind::kGlobal: {
        const PyGlobal& g = v.as_global("");
        global(g.module, g.name);
        return;
      }
      case PyValue::Kind::kObject: {
        const PyObject& o = v.as_object("");
        global(o.type.module, o.type.name);
        tuple(o.args);
        out_ += o.new_object ? '\x81' : 'R';  // NEWOBJ or REDUCE
        if (o.state) {
          value(*o.state);
          out_ += 'b';
        }
        return;
      }
      case PyValue::Kind::kTensor:
        tensor(v.as_tensor(""));
        return;
    }
  }

  std::string out_;
};

}  // namespace

std::string write_pickle(const PyValue& value) {
  return Writer().finish(value);
}

}  // namespace megatron
