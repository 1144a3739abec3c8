#include "data/tokenizers/sentencepiece_model_file.h"

#include <cstring>

#include "core/error.h"

namespace megatron {

namespace {

// Protobuf's wire types (the low 3 bits of a field's key).
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// A cursor over one message's bytes; errors name the file and the absolute offset.
class WireReader {
 public:
  WireReader(std::string_view bytes, const std::string& name, size_t base = 0)
      : bytes_(bytes), name_(name), base_(base) {}

  bool done() const { return pos_ == bytes_.size(); }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      require(pos_ < bytes_.size(), "a varint runs past the end");
      const auto byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("a varint is longer than 10 bytes");
  }
  float fixed32_float() {
    require(bytes_.size() - pos_ >= 4, "a 32-bit field runs past the end");
    float value;
    std::memcpy(&value, bytes_.data() + pos_, 4);  // little-endian, as protobuf writes it
    pos_ += 4;
    return value;
  }
  // A length-delimited field: a reader over its bytes, or the bytes themselves.
  WireReader nested() {
    const size_t length = delimited_length();
    WireReader inner(bytes_.substr(pos_, length), name_, base_ + pos_);
    pos_ += length;
    return inner;
  }
  std::string_view delimited() {
    const size_t length = delimited_length();
    const std::string_view b = bytes_.substr(pos_, length);
    pos_ += length;
    return b;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        require(bytes_.size() - pos_ >= 8, "a 64-bit field runs past the end");
        pos_ += 8;
        return;
      case kLengthDelimited:
        pos_ += delimited_length();
        return;
      case kFixed32:
        require(bytes_.size() - pos_ >= 4, "a 32-bit field runs past the end");
        pos_ += 4;
        return;
      default:
        fail("wire type ", wire_type, " is not one protobuf writes");
    }
  }
  // Checks that a known field arrived with the wire type its declaration gives it.
  void expect(uint32_t wire_type, uint32_t expected, const char* field) {
    require(wire_type == expected, field, " has wire type ", wire_type, ", not ", expected);
  }

  template <typename... Args>
  void require(bool ok, const Args&... what) const {
    if (!ok) fail(what...);
  }
  template <typename... Args>
  [[noreturn]] void fail(const Args&... what) const {
    MT_THROW("SentencePiece model '", name_, "' is not a valid model file (at byte ", base_ + pos_,
             ": ", what..., "); pass the .model file the tokenizer was trained into");
  }

 private:
  size_t delimited_length() {
    const uint64_t length = varint();
    require(length <= bytes_.size() - pos_, "a field of ", length, " bytes runs past the end");
    return size_t(length);
  }

  std::string_view bytes_;
  const std::string& name_;
  size_t base_;  // offset of bytes_ in the file
  size_t pos_ = 0;
};

SentencePieceModelFile::Piece parse_piece(WireReader r) {
  SentencePieceModelFile::Piece piece;
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    if (field == 1) {
      r.expect(wire, kLengthDelimited, "SentencePiece.piece");
      piece.piece = std::string(r.delimited());
    } else if (field == 2) {
      r.expect(wire, kFixed32, "SentencePiece.score");
      piece.score = r.fixed32_float();
    } else if (field == 3) {
      r.expect(wire, kVarint, "SentencePiece.type");
      const uint64_t type = r.varint();
      r.require(type >= 1 && type <= 6, "piece type ", type, " is not one of sentencepiece's 1-6");
      piece.type = SentencePieceModelFile::PieceType(type);
    } else {
      r.skip(wire);
    }
  }
  return piece;
}

void parse_trainer_spec(WireReader r, SentencePieceModelFile& model) {
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    if (field == 3) {
      r.expect(wire, kVarint, "TrainerSpec.model_type");
      const uint64_t type = r.varint();
      r.require(type >= 1 && type <= 4, "model type ", type, " is not one of sentencepiece's 1-4");
      model.model_type = SentencePieceModelFile::ModelType(type);
    } else if (field == 35) {
      r.expect(wire, kVarint, "TrainerSpec.byte_fallback");
      model.byte_fallback = r.varint() != 0;
    } else if (field >= 40 && field <= 43) {
      r.expect(wire, kVarint, "TrainerSpec's unk/bos/eos/pad id");
      // An int32 varint: a negative id (-1, none) is its 64-bit two's complement.
      const auto id = int32_t(int64_t(r.varint()));
      int32_t* ids[] = {&model.unk_id, &model.bos_id, &model.eos_id, &model.pad_id};
      *ids[field - 40] = id;
    } else {
      r.skip(wire);
    }
  }
}

void parse_normalizer_spec(WireReader r, SentencePieceModelFile& model) {
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    if (field == 1) {
      r.expect(wire, kLengthDelimited, "NormalizerSpec.name");
      model.normalizer_name = std::string(r.delimited());
    } else if (field == 3) {
      r.expect(wire, kVarint, "NormalizerSpec.add_dummy_prefix");
      model.add_dummy_prefix = r.varint() != 0;
    } else if (field == 4) {
      r.expect(wire, kVarint, "NormalizerSpec.remove_extra_whitespaces");
      model.remove_extra_whitespaces = r.varint() != 0;
    } else {
      r.skip(wire);
    }
  }
}

}  // namespace

SentencePieceModelFile parse_sentencepiece_model(std::string_view bytes, const std::string& name) {
  SentencePieceModelFile model;
  WireReader r(bytes, name);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = uint32_t(key >> 3), wire = uint32_t(key & 7);
    if (field >= 1 && field <= 3) {
      r.expect(wire, kLengthDelimited, "a ModelProto message field");
      WireReader message = r.nested();
      if (field == 1)
        model.pieces.push_back(parse_piece(message));
      else if (field == 2)
        parse_trainer_spec(message, model);
      else
        parse_normalizer_spec(message, model);
    } else {
      r.skip(wire);
    }
  }
  r.require(!model.pieces.empty(), "it holds no pieces");
  for (const int32_t id : {model.unk_id, model.bos_id, model.eos_id, model.pad_id})
    r.require(id >= -1 && id < int64_t(model.pieces.size()), "special id ", id, " is not below ",
              model.pieces.size(), " pieces");
  return model;
}

}  // namespace megatron
