// The parts of a SentencePiece .model file (a serialized sentencepiece.ModelProto, protobuf
// wire format) that other programs need to reproduce its tokenizer — what llama.cpp's GGUF
// tokenizer metadata holds — read without libsentencepiece or protobuf's generated classes
// (Debian's libsentencepiece-dev installs no sentencepiece_model.pb.h, and libsentencepiece
// does not say which pieces are user-defined):
//
//   ModelProto       1: repeated SentencePiece pieces   2: TrainerSpec   3: NormalizerSpec
//   SentencePiece    1: string piece   2: float score   3: Type type (NORMAL when absent)
//   TrainerSpec      3: ModelType model_type (UNIGRAM when absent)   35: bool byte_fallback
//                    40/41/42/43: int32 unk_id/bos_id/eos_id/pad_id (0/1/2/-1 when absent)
//   NormalizerSpec   1: string name   3: bool add_dummy_prefix   4: bool remove_extra_whitespaces
//                    (both true when absent)
//
// Every other field is skipped by its wire type. Piece ids are positions in `pieces`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

struct SentencePieceModelFile {
  // sentencepiece.ModelProto.SentencePiece.Type; llama.cpp's llama_token_type has the same values.
  enum class PieceType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
  };
  // sentencepiece.TrainerSpec.ModelType.
  enum class ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = PieceType::kNormal;
  };
  std::vector<Piece> pieces;
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  // -1: the model has none
  std::string normalizer_name;  // "identity", "nmt_nfkc", ... ("" when not recorded)
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
};

// Parses `bytes` (a .model file's contents; `name` is the file, for messages). Throws Error
// naming the file and the byte offset when the wire format is broken, a piece's type is not one
// of sentencepiece's, or the model has no pieces.
SentencePieceModelFile parse_sentencepiece_model(std::string_view bytes, const std::string& name);

}  // namespace megatron
