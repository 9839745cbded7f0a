//===- MetadataReader.cpp - the runtime's reader of __tally_metadata ------===//
//
// A strict reader of the YAML subset yaml-cpp's emitter writes for the
// metadata schema (docs/metadata.md), in two steps:
//
//  1. A parser builds a small tree of mappings, sequences and scalars:
//     block mappings and sequences by indentation (a "- " item may hold a
//     compact mapping; a mapping's sequence may sit at the key's own
//     indentation), flow mappings and sequences (`{a: 1, b: x}`, `[]`),
//     plain, double-quoted and single-quoted scalars on one line, comments.
//     Anchors, tags, block scalars, multi-line scalars, complex keys and
//     documents markers are errors. The parser knows where in the schema
//     it is, so it keeps only the fields the runtime reads: unknown keys
//     (forward compatibility within version 1), notes and resources are
//     parsed and checked for well-formedness but not stored.
//  2. The schema walk reads the version, the kernels and their variants,
//     and checks every extra parameter's layout (MetadataReader.h).
//
// The input is a string_view, not NUL terminated: every read goes through
// peek(), which returns -1 past the end. Nesting is bounded (MaxDepth), so
// the recursion is too; numbers are range-checked before use; no
// exceptions are thrown. Errors are "LINE:COL: message", both 1-based
// (columns count bytes).
//
//===----------------------------------------------------------------------===//

#include "tally/Runtime/MetadataReader.h"

#include <cstdio>
#include <set>
#include <utility>

namespace tally::rt {

const KernelMetadata *ModuleMetadata::find(std::string_view Name) const {
  for (const KernelMetadata &K : Kernels)
    if (K.Name == Name)
      return &K;
  return nullptr;
}

namespace {

/// Collections nested deeper than this are refused. The schema needs 7
/// (root, kernels, kernel, variants, variant, extra_params, parameter).
constexpr unsigned MaxDepth = 32;

/// CUDA's limit on a kernel's parameter buffer.
constexpr uint32_t MaxParamBytes = 32764;

/// Where the parser is in the schema, which decides what it keeps.
enum class Level : uint8_t {
  Skip,   ///< not read by the runtime: checked, not stored
  Scalar, ///< a field the runtime reads
  Root,
  KernelList,
  Kernel,
  VariantList,
  Variant,
  ExtraList,
  Extra,
};

bool isMapLevel(Level L) {
  return L == Level::Root || L == Level::Kernel || L == Level::Variant ||
         L == Level::Extra;
}

bool isListLevel(Level L) {
  return L == Level::KernelList || L == Level::VariantList ||
         L == Level::ExtraList;
}

Level mapChild(Level L, std::string_view Key) {
  switch (L) {
  case Level::Root:
    if (Key == "tally_metadata_version")
      return Level::Scalar;
    if (Key == "kernels")
      return Level::KernelList;
    return Level::Skip;
  case Level::Kernel:
    if (Key == "name" || Key == "reason" || Key == "reads_grid_size")
      return Level::Scalar;
    if (Key == "variants")
      return Level::VariantList;
    return Level::Skip;
  case Level::Variant:
    if (Key == "kind" || Key == "name" || Key == "original_param_bytes" ||
        Key == "param_bytes")
      return Level::Scalar;
    if (Key == "extra_params")
      return Level::ExtraList;
    return Level::Skip;
  case Level::Extra:
    if (Key == "role" || Key == "type" || Key == "offset" || Key == "size")
      return Level::Scalar;
    return Level::Skip;
  default:
    return Level::Skip;
  }
}

Level seqItem(Level L) {
  switch (L) {
  case Level::KernelList:
    return Level::Kernel;
  case Level::VariantList:
    return Level::Variant;
  case Level::ExtraList:
    return Level::Extra;
  default:
    return Level::Skip;
  }
}

struct Node {
  enum class Kind : uint8_t { Null, Scalar, Map, Seq };
  Kind K = Kind::Null;
  bool Plain = false; ///< a plain (unquoted) scalar
  size_t Line = 0, Col = 0;
  std::string Text; ///< scalars
  /// Sequences: the items. Mappings: key, value, key, value, ... (only the
  /// entries the schema reads).
  std::vector<Node> Kids;

  const Node *get(std::string_view Key) const {
    for (size_t I = 0; I + 1 < Kids.size(); I += 2)
      if (Kids[I].Text == Key)
        return &Kids[I + 1];
    return nullptr;
  }
};

/// A character for a message: 'c' when printable, else its byte value.
std::string describe(int C) {
  if (C < 0)
    return "end of input";
  char Buf[16];
  if (C > 0x20 && C < 0x7f)
    std::snprintf(Buf, sizeof Buf, "'%c'", C);
  else
    std::snprintf(Buf, sizeof Buf, "byte 0x%02x", C);
  return Buf;
}

bool isFlowIndicator(int C) {
  return C == ',' || C == '[' || C == ']' || C == '{' || C == '}';
}

int hexValue(int C) {
  if (C >= '0' && C <= '9')
    return C - '0';
  if (C >= 'a' && C <= 'f')
    return C - 'a' + 10;
  if (C >= 'A' && C <= 'F')
    return C - 'A' + 10;
  return -1;
}

void appendUTF8(std::string &Out, uint32_t CP) {
  if (CP < 0x80) {
    Out += char(CP);
  } else if (CP < 0x800) {
    Out += char(0xc0 | (CP >> 6));
    Out += char(0x80 | (CP & 0x3f));
  } else if (CP < 0x10000) {
    Out += char(0xe0 | (CP >> 12));
    Out += char(0x80 | ((CP >> 6) & 0x3f));
    Out += char(0x80 | (CP & 0x3f));
  } else {
    Out += char(0xf0 | (CP >> 18));
    Out += char(0x80 | ((CP >> 12) & 0x3f));
    Out += char(0x80 | ((CP >> 6) & 0x3f));
    Out += char(0x80 | (CP & 0x3f));
  }
}

//===----------------------------------------------------------------------===//
// The YAML parser
//===----------------------------------------------------------------------===//

class Parser {
public:
  explicit Parser(std::string_view Text) : T(Text) {}

  bool parseDocument(Node &Root);
  const std::string &error() const { return Err; }

private:
  std::string_view T;
  size_t P = 0;         ///< the next byte
  size_t Line = 1;      ///< 1-based line of P
  size_t LineStart = 0; ///< offset of the line holding P
  /// Block structure: after skipToContent(), the column (0-based) of the
  /// first byte of the current line's content.
  size_t Indent = 0;
  std::string Err;

  int peek(size_t Off = 0) const {
    return Off < T.size() - P ? static_cast<unsigned char>(T[P + Off]) : -1;
  }
  bool atEnd() const { return P >= T.size(); }
  size_t col() const { return P - LineStart + 1; }
  /// Space, line break or end of input: what may follow "-" or ":".
  bool isBlank(int C) const { return C == ' ' || C == '\n' || C < 0; }

  bool fail(size_t L, size_t C, const std::string &Msg) {
    if (Err.empty())
      Err = std::to_string(L) + ":" + std::to_string(C) + ": " + Msg;
    return false;
  }
  bool failHere(const std::string &Msg) { return fail(Line, col(), Msg); }
  void newLine() {
    ++P;
    ++Line;
    LineStart = P;
  }
  void setPos(Node &N) const {
    N.Line = Line;
    N.Col = col();
  }

  bool skipToContent();
  bool endLine();
  bool skipSpaces(bool &Saw);
  bool checkDepth(unsigned Depth) {
    return Depth <= MaxDepth || failHere("nesting deeper than " +
                                         std::to_string(MaxDepth) + " levels");
  }

  bool parseBlockNode(Level L, unsigned Depth, long Parent, Node &Out);
  bool parseBlockMap(Level L, unsigned Depth, Node &Out, Node *FirstKey);
  bool parseBlockSeq(Level L, unsigned Depth, Node &Out);
  bool parseInlineValue(Level L, unsigned Depth, long Parent, Node &Out);
  bool parseFlowNode(Level L, unsigned Depth, long Parent, Node &Out);
  bool parseFlowCollection(Level L, unsigned Depth, long Parent, Node &Out);
  bool skipFlowSpace(long Parent);
  bool parseScalar(bool Flow, bool Keep, Node &Out, bool &Colon);
  bool scanPlain(bool Flow, bool Keep, Node &Out, bool &Colon);
  bool parseQuoted(bool Keep, Node &Out);
  bool parseEscape(std::string &Out, bool Keep);
  bool addEntry(Level L, std::set<std::string> &Seen, Node &Map, Node &&Key,
                Node &&Value);
};

/// Skips blank and comment lines from the start of a line. Stops at the
/// first content byte (setting Indent) or at the end of the input.
bool Parser::skipToContent() {
  while (true) {
    while (peek() == ' ')
      ++P;
    int C = peek();
    if (C == '\t')
      return failHere("tab character in indentation");
    if (C < 0)
      return true;
    if (C == '\n') {
      newLine();
      continue;
    }
    if (C == '#') {
      while (!atEnd() && peek() != '\n')
        ++P;
      continue;
    }
    Indent = P - LineStart;
    if (Indent == 0 &&
        ((C == '-' && peek(1) == '-' && peek(2) == '-') ||
         (C == '.' && peek(1) == '.' && peek(2) == '.')) &&
        isBlank(peek(3)))
      return failHere("document markers are not supported");
    return true;
  }
}

/// Skips spaces; a tab is an error (tally-opt writes none outside quotes).
bool Parser::skipSpaces(bool &Saw) {
  Saw = false;
  while (true) {
    int C = peek();
    if (C == ' ') {
      ++P;
      Saw = true;
    } else if (C == '\t') {
      return failHere("tab characters are only allowed in quoted scalars");
    } else {
      return true;
    }
  }
}

/// After a value on its line: spaces, an optional comment, then the line
/// break, and on to the next content line.
bool Parser::endLine() {
  bool Saw;
  if (!skipSpaces(Saw))
    return false;
  // A comment needs a space before it, maybe skipped by the caller.
  Saw = Saw || (P > LineStart && T[P - 1] == ' ');
  int C = peek();
  if (C == '#' && Saw) {
    while (!atEnd() && peek() != '\n')
      ++P;
    C = peek();
  }
  if (C == '\n')
    newLine();
  else if (C >= 0)
    return failHere("unexpected " + describe(C) + " after the value");
  return skipToContent();
}

bool Parser::parseDocument(Node &Root) {
  if (!skipToContent())
    return false;
  if (atEnd())
    return failHere("empty metadata");
  if (!parseBlockNode(Level::Root, 1, /*Parent=*/-1, Root))
    return false;
  if (!atEnd())
    return failHere("unexpected content after the top-level node");
  return true;
}

/// A node starting at P, the first content of a line or what follows
/// "- " on it; its column is the indentation of a block collection. Parent
/// is the indentation of the collection holding it (-1 at the top).
bool Parser::parseBlockNode(Level L, unsigned Depth, long Parent, Node &Out) {
  if (!checkDepth(Depth))
    return false;
  int C = peek();
  if (C == '-' && isBlank(peek(1)))
    return parseBlockSeq(L, Depth, Out);
  if (C == '[' || C == '{') {
    if (!parseFlowCollection(L, Depth, Parent, Out))
      return false;
    bool Saw;
    if (!skipSpaces(Saw))
      return false;
    if (peek() == ':')
      return failHere("complex mapping keys are not supported");
    return endLine();
  }
  Node Scalar;
  bool Colon = false;
  if (!parseScalar(/*Flow=*/false, /*Keep=*/true, Scalar, Colon))
    return false;
  if (Colon)
    return parseBlockMap(L, Depth, Out, &Scalar);
  if (L != Level::Skip)
    Out = std::move(Scalar);
  else
    Out.K = Node::Kind::Scalar;
  return endLine();
}

/// Records a mapping entry, refusing duplicate keys. Only the entries the
/// schema reads are stored.
bool Parser::addEntry(Level L, std::set<std::string> &Seen, Node &Map,
                      Node &&Key, Node &&Value) {
  if (!Seen.insert(Key.Text).second)
    return fail(Key.Line, Key.Col, "duplicate key '" + Key.Text + "'");
  if (isMapLevel(L) && mapChild(L, Key.Text) != Level::Skip) {
    Map.Kids.push_back(std::move(Key));
    Map.Kids.push_back(std::move(Value));
  }
  return true;
}

/// A block mapping whose keys sit at the column of P (or of FirstKey, when
/// the caller has read it and P is at its ':').
bool Parser::parseBlockMap(Level L, unsigned Depth, Node &Out, Node *FirstKey) {
  size_t Column = FirstKey ? FirstKey->Col - 1 : P - LineStart;
  Out = Node();
  Out.K = Node::Kind::Map;
  if (FirstKey) {
    Out.Line = FirstKey->Line;
    Out.Col = FirstKey->Col;
  } else {
    setPos(Out);
  }
  std::set<std::string> Seen;
  while (true) {
    Node Key;
    if (FirstKey) {
      Key = std::move(*FirstKey);
      FirstKey = nullptr;
    } else {
      int C = peek();
      if (C == '-' && isBlank(peek(1)))
        return failHere("expected a mapping key, found a sequence item");
      if (C == '[' || C == '{')
        return failHere("complex mapping keys are not supported");
      bool Colon = false;
      if (!parseScalar(/*Flow=*/false, /*Keep=*/true, Key, Colon))
        return false;
      if (!Colon)
        return fail(Key.Line, Key.Col, "expected ':' after the mapping key");
    }
    ++P; // the ':'
    Level Child = isMapLevel(L) ? mapChild(L, Key.Text) : Level::Skip;
    Node Value;
    bool Saw;
    if (!skipSpaces(Saw))
      return false;
    int C = peek();
    if (C < 0 || C == '\n' || C == '#') {
      // The value is on the following lines, or empty.
      size_t KeyLine = Line;
      if (!endLine())
        return false;
      if (!atEnd() && Line != KeyLine && Indent > Column) {
        if (!parseBlockNode(Child, Depth + 1, long(Column), Value))
          return false;
      } else if (!atEnd() && Line != KeyLine && Indent == Column &&
                 peek() == '-' && isBlank(peek(1))) {
        // A sequence at the key's indentation ("key:\n- a").
        if (!parseBlockSeq(Child, Depth + 1, Value))
          return false;
      } else {
        Value.Line = Key.Line;
        Value.Col = Key.Col;
      }
    } else {
      if (!parseInlineValue(Child, Depth + 1, long(Column), Value))
        return false;
    }
    if (!addEntry(L, Seen, Out, std::move(Key), std::move(Value)))
      return false;
    if (atEnd() || Indent < Column)
      return true;
    if (Indent > Column)
      return failHere("unexpected indentation");
  }
}

/// A value after "key: " on the key's line: a scalar or a flow collection.
bool Parser::parseInlineValue(Level L, unsigned Depth, long Parent, Node &Out) {
  if (!checkDepth(Depth))
    return false;
  int C = peek();
  if (C == '-' && isBlank(peek(1)))
    return failHere("a block sequence must start on a new line");
  if (C == '[' || C == '{') {
    if (!parseFlowCollection(L, Depth, Parent, Out))
      return false;
  } else {
    bool Colon = false;
    size_t L0 = Line, C0 = col();
    if (!parseScalar(/*Flow=*/false, L != Level::Skip, Out, Colon))
      return false;
    if (Colon)
      return fail(L0, C0,
                  Out.Plain ? "mapping values are not allowed here (quote "
                              "the scalar if it holds ': ')"
                            : "mapping values are not allowed here");
  }
  bool Saw;
  if (!skipSpaces(Saw))
    return false;
  if (peek() == ':')
    return failHere("mapping values are not allowed here");
  return endLine();
}

/// A block sequence whose "-" items sit at the column of P.
bool Parser::parseBlockSeq(Level L, unsigned Depth, Node &Out) {
  size_t Column = P - LineStart;
  Out = Node();
  Out.K = Node::Kind::Seq;
  setPos(Out);
  Level Item = seqItem(L);
  while (true) {
    Node Value;
    setPos(Value);
    size_t ItemLine = Line;
    ++P; // the '-'
    bool Saw;
    if (!skipSpaces(Saw))
      return false;
    int C = peek();
    if (C < 0 || C == '\n' || C == '#') {
      if (!endLine())
        return false;
      if (!atEnd() && Line != ItemLine && Indent > Column &&
          !parseBlockNode(Item, Depth + 1, long(Column), Value))
        return false;
    } else if (!parseBlockNode(Item, Depth + 1, long(Column), Value)) {
      return false;
    }
    if (isListLevel(L))
      Out.Kids.push_back(std::move(Value));
    if (atEnd() || Indent < Column)
      return true;
    if (Indent > Column)
      return failHere("unexpected indentation");
    if (!(peek() == '-' && isBlank(peek(1))))
      return true; // the parent mapping's next key ("key:\n- a\nkey2: b")
  }
}

/// Skips spaces, line breaks and comments inside a flow collection. Lines
/// that continue it must be indented more than the block holding it.
bool Parser::skipFlowSpace(long Parent) {
  bool AfterSpace = false;
  while (true) {
    int C = peek();
    if (C == ' ') {
      ++P;
      AfterSpace = true;
    } else if (C == '\n') {
      newLine();
      AfterSpace = true;
      while (peek() == ' ')
        ++P;
      int D = peek();
      if (D >= 0 && D != '\n' && D != '#' && D != '\t' &&
          long(P - LineStart) <= Parent)
        return failHere("a flow collection's lines must be indented more "
                        "than its parent");
    } else if (C == '#' && AfterSpace) {
      while (!atEnd() && peek() != '\n')
        ++P;
    } else if (C == '\t') {
      return failHere("tab characters are only allowed in quoted scalars");
    } else {
      return true;
    }
  }
}

/// `{k: v, ...}` or `[a, ...]` at P; Parent is the indentation of the block
/// collection holding it.
bool Parser::parseFlowCollection(Level L, unsigned Depth, long Parent,
                                 Node &Out) {
  if (!checkDepth(Depth))
    return false;
  bool IsMap = peek() == '{';
  char Close = IsMap ? '}' : ']';
  Out = Node();
  Out.K = IsMap ? Node::Kind::Map : Node::Kind::Seq;
  setPos(Out);
  ++P;
  std::set<std::string> Seen;
  if (!skipFlowSpace(Parent))
    return false;
  if (peek() == Close) {
    ++P;
    return true;
  }
  while (true) {
    if (atEnd())
      return fail(Out.Line, Out.Col,
                  IsMap ? "unterminated flow mapping"
                        : "unterminated flow sequence");
    if (IsMap) {
      int C = peek();
      if (C == '[' || C == '{')
        return failHere("complex mapping keys are not supported");
      Node Key;
      bool Colon = false;
      if (!parseScalar(/*Flow=*/true, /*Keep=*/true, Key, Colon))
        return false;
      if (!Colon) {
        bool Saw;
        if (!skipSpaces(Saw))
          return false;
        if (peek() != ':' || !(isBlank(peek(1)) || isFlowIndicator(peek(1))))
          return fail(Key.Line, Key.Col, "expected ':' after the mapping key");
      }
      ++P; // the ':'
      if (!skipFlowSpace(Parent))
        return false;
      Level Child = isMapLevel(L) ? mapChild(L, Key.Text) : Level::Skip;
      Node Value;
      int D = peek();
      if (D == ',' || D == '}') {
        Value.Line = Key.Line;
        Value.Col = Key.Col;
      } else if (!parseFlowNode(Child, Depth + 1, Parent, Value)) {
        return false;
      }
      if (!addEntry(L, Seen, Out, std::move(Key), std::move(Value)))
        return false;
    } else {
      Node Value;
      if (!parseFlowNode(seqItem(L), Depth + 1, Parent, Value))
        return false;
      bool Saw;
      if (!skipSpaces(Saw))
        return false;
      if (peek() == ':')
        return failHere("mappings inside flow sequences are not supported");
      if (isListLevel(L))
        Out.Kids.push_back(std::move(Value));
    }
    if (!skipFlowSpace(Parent))
      return false;
    int C = peek();
    if (C == ',') {
      ++P;
      if (!skipFlowSpace(Parent))
        return false;
      if (peek() == Close) { // a trailing comma
        ++P;
        return true;
      }
      continue;
    }
    if (C == Close) {
      ++P;
      return true;
    }
    if (C < 0)
      continue; // reported as unterminated above
    return failHere(std::string("expected ',' or '") + Close + "', found " +
                    describe(C));
  }
}

/// A value inside a flow collection.
bool Parser::parseFlowNode(Level L, unsigned Depth, long Parent, Node &Out) {
  int C = peek();
  if (C == '[' || C == '{')
    return parseFlowCollection(L, Depth, Parent, Out);
  bool Colon = false;
  size_t L0 = Line, C0 = col();
  if (!parseScalar(/*Flow=*/true, L != Level::Skip, Out, Colon))
    return false;
  if (Colon)
    return fail(L0, C0, "mapping values are not allowed here");
  return true;
}

/// A quoted or plain scalar at P. Colon is set when a ':' that makes it a
/// mapping key follows (P is then at the ':').
bool Parser::parseScalar(bool Flow, bool Keep, Node &Out, bool &Colon) {
  Colon = false;
  int C = peek();
  if (C == '"' || C == '\'') {
    if (!parseQuoted(Keep, Out))
      return false;
    size_t Save = P;
    while (peek() == ' ')
      ++P;
    if (peek() == ':' &&
        (isBlank(peek(1)) || (Flow && isFlowIndicator(peek(1))))) {
      Colon = true;
      return true;
    }
    P = Save;
    return true;
  }
  return scanPlain(Flow, Keep, Out, Colon);
}

bool Parser::scanPlain(bool Flow, bool Keep, Node &Out, bool &Colon) {
  Out = Node();
  Out.K = Node::Kind::Scalar;
  Out.Plain = true;
  setPos(Out);
  int C = peek();
  auto Safe = [&](int D) {
    return D >= 0 && D != ' ' && D != '\n' && D != '\t' &&
           !(Flow && isFlowIndicator(D));
  };
  switch (C) {
  case -1:
  case '\n':
    return failHere("expected a value");
  case '-':
  case '?':
  case ':':
    if (!Safe(peek(1)))
      return failHere("unexpected " + describe(C));
    break;
  case '&':
  case '*':
  case '!':
    return failHere("anchors, aliases and tags are not supported");
  case '|':
  case '>':
    return failHere("block scalars are not supported");
  case ',':
  case '[':
  case ']':
  case '{':
  case '}':
  case '#':
  case '%':
  case '@':
  case '`':
    return failHere("unexpected " + describe(C));
  default:
    break;
  }
  size_t Start = P, End = P;
  while (true) {
    C = peek();
    if (C < 0 || C == '\n')
      break;
    if (C == ' ') {
      if (peek(1) == '#')
        break;
      ++P;
      continue;
    }
    if (C == ':' && (isBlank(peek(1)) || (Flow && isFlowIndicator(peek(1))))) {
      Colon = true;
      break;
    }
    if (Flow && isFlowIndicator(C))
      break;
    if (C == '\t')
      return failHere("tab characters are only allowed in quoted scalars");
    // yaml-cpp's emitter escapes every control character but the carriage
    // return, which it leaves in plain scalars ("a\rb" is written a^Mb).
    if (C < 0x20 && C != '\r')
      return failHere("control character " + describe(C) +
                      " in a plain scalar");
    ++P;
    End = P;
  }
  // With a ':' P stays on it (past any spaces before it: "key : value");
  // without, the trailing spaces belong to what follows.
  if (!Colon)
    P = End;
  if (Keep)
    Out.Text.assign(T.data() + Start, End - Start);
  return true;
}

bool Parser::parseQuoted(bool Keep, Node &Out) {
  Out = Node();
  Out.K = Node::Kind::Scalar;
  setPos(Out);
  const bool Double = peek() == '"';
  ++P;
  while (true) {
    int C = peek();
    if (C < 0)
      return fail(Out.Line, Out.Col, "unterminated quoted scalar");
    if (C == '\n')
      return failHere("line break in a quoted scalar (tally-opt writes "
                      "them as \\n)");
    if (Double && C == '"') {
      ++P;
      return true;
    }
    if (!Double && C == '\'') {
      if (peek(1) == '\'') {
        if (Keep)
          Out.Text += '\'';
        P += 2;
        continue;
      }
      ++P;
      return true;
    }
    if (Double && C == '\\') {
      if (!parseEscape(Out.Text, Keep))
        return false;
      continue;
    }
    if (C < 0x20 && C != '\t')
      return failHere("control character " + describe(C) +
                      " in a quoted scalar");
    if (Keep)
      Out.Text += char(C);
    ++P;
  }
}

/// A double-quoted scalar's escape sequence, P at the backslash.
bool Parser::parseEscape(std::string &Out, bool Keep) {
  size_t L0 = Line, C0 = col();
  ++P;
  int E = peek();
  uint32_t CP = 0;
  unsigned Digits = 0;
  switch (E) {
  case -1:
    return fail(L0, C0, "unterminated escape sequence");
  case '\n':
    return fail(L0, C0, "escaped line breaks are not supported");
  case '0':
    CP = 0;
    break;
  case 'a':
    CP = 7;
    break;
  case 'b':
    CP = 8;
    break;
  case 't':
  case '\t':
    CP = 9;
    break;
  case 'n':
    CP = 10;
    break;
  case 'v':
    CP = 11;
    break;
  case 'f':
    CP = 12;
    break;
  case 'r':
    CP = 13;
    break;
  case 'e':
    CP = 27;
    break;
  case ' ':
  case '"':
  case '/':
  case '\\':
    CP = uint32_t(E);
    break;
  case 'N':
    CP = 0x85;
    break;
  case '_':
    CP = 0xa0;
    break;
  case 'L':
    CP = 0x2028;
    break;
  case 'P':
    CP = 0x2029;
    break;
  case 'x':
    Digits = 2;
    break;
  case 'u':
    Digits = 4;
    break;
  case 'U':
    Digits = 8;
    break;
  default:
    return fail(
        L0, C0,
        "unknown escape sequence '\\" +
            (E > 0x20 && E < 0x7f ? std::string(1, char(E)) : describe(E)) +
            "'");
  }
  ++P;
  for (unsigned I = 0; I < Digits; ++I) {
    int H = hexValue(peek());
    if (H < 0)
      return fail(L0, C0,
                  "expected " + std::to_string(Digits) +
                      " hexadecimal digits after '\\" + char(E) + "'");
    CP = CP << 4 | uint32_t(H);
    ++P;
  }
  if (CP > 0x10ffff || (CP >= 0xd800 && CP <= 0xdfff))
    return fail(L0, C0, "escape sequence for an invalid code point");
  if (Keep)
    appendUTF8(Out, CP);
  return true;
}

//===----------------------------------------------------------------------===//
// The schema
//===----------------------------------------------------------------------===//

class Schema {
public:
  bool read(const Node &Root, ModuleMetadata &Out);
  std::string Err;

private:
  bool fail(const Node &N, const std::string &Msg) {
    Err = std::to_string(N.Line) + ":" + std::to_string(N.Col) + ": " + Msg;
    return false;
  }
  const Node *need(const Node &Map, const char *Key);
  bool getString(const Node &Map, const char *Key, std::string &Out,
                 bool Required);
  bool getU32(const Node &Map, const char *Key, uint32_t &Out);
  bool readKernel(const Node &N, KernelMetadata &K);
  bool readVariant(const Node &N, const KernelMetadata &K, VariantInfo &V,
                   bool &Known);
};

const Node *Schema::need(const Node &Map, const char *Key) {
  const Node *N = Map.get(Key);
  if (!N)
    fail(Map, std::string("missing '") + Key + "'");
  return N;
}

bool Schema::getString(const Node &Map, const char *Key, std::string &Out,
                       bool Required) {
  const Node *N = Map.get(Key);
  if (!N)
    return !Required || fail(Map, std::string("missing '") + Key + "'");
  if (N->K != Node::Kind::Scalar)
    return fail(*N, std::string("'") + Key + "' must be a string");
  if (N->Text.find('\0') != std::string::npos)
    return fail(*N, std::string("'") + Key + "' holds a NUL character");
  Out = N->Text;
  return true;
}

/// Parses decimal digits into a uint64, saturating; false if not digits.
bool parseUnsigned(const std::string &S, uint64_t &V) {
  if (S.empty())
    return false;
  V = 0;
  for (char C : S) {
    if (C < '0' || C > '9')
      return false;
    if (V <= UINT32_MAX) // keeps V * 10 + 9 far from overflowing
      V = V * 10 + uint64_t(C - '0');
  }
  return true;
}

bool Schema::getU32(const Node &Map, const char *Key, uint32_t &Out) {
  const Node *N = need(Map, Key);
  if (!N)
    return false;
  uint64_t V = 0;
  if (N->K != Node::Kind::Scalar || !N->Plain || !parseUnsigned(N->Text, V))
    return fail(*N, std::string("'") + Key + "' must be an unsigned integer");
  if (V > UINT32_MAX)
    return fail(*N, std::string("'") + Key + "' is out of range (" + N->Text +
                        " does not fit in 32 bits)");
  Out = uint32_t(V);
  return true;
}

bool Schema::read(const Node &Root, ModuleMetadata &Out) {
  if (Root.K != Node::Kind::Map)
    return fail(Root, "the metadata must be a mapping");
  const Node *Version = need(Root, "tally_metadata_version");
  if (!Version)
    return false;
  uint64_t V = 0;
  if (Version->K != Node::Kind::Scalar || !Version->Plain ||
      !parseUnsigned(Version->Text, V))
    return fail(*Version,
                "'tally_metadata_version' must be an unsigned integer");
  if (V != ModuleMetadata::SupportedVersion)
    return fail(*Version, "unsupported metadata version " + Version->Text +
                              " (this runtime reads version " +
                              std::to_string(ModuleMetadata::SupportedVersion) +
                              ")");
  const Node *Kernels = need(Root, "kernels");
  if (!Kernels)
    return false;
  if (Kernels->K != Node::Kind::Seq)
    return fail(*Kernels, "'kernels' must be a sequence");
  std::set<std::string> Names;
  for (const Node &KN : Kernels->Kids) {
    KernelMetadata K;
    if (!readKernel(KN, K))
      return false;
    if (!Names.insert(K.Name).second)
      return fail(*KN.get("name"), "kernel '" + K.Name + "' is listed twice");
    Out.Kernels.push_back(std::move(K));
  }
  return true;
}

bool Schema::readKernel(const Node &N, KernelMetadata &K) {
  if (N.K != Node::Kind::Map)
    return fail(N, "a kernel must be a mapping");
  if (!getString(N, "name", K.Name, true))
    return false;
  if (K.Name.empty())
    return fail(*N.get("name"), "empty kernel name");
  if (!getString(N, "reason", K.Reason, false))
    return false;
  if (const Node *G = N.get("reads_grid_size")) {
    if (G->K != Node::Kind::Scalar || !G->Plain ||
        (G->Text != "true" && G->Text != "false"))
      return fail(*G, "'reads_grid_size' must be true or false");
    K.ReadsGridSize = G->Text == "true";
  }
  const Node *Vs = N.get("variants");
  if (!Vs)
    return true;
  if (Vs->K != Node::Kind::Seq)
    return fail(*Vs, "'variants' must be a sequence");
  for (const Node &VN : Vs->Kids) {
    VariantInfo V;
    bool Known = false;
    if (!readVariant(VN, K, V, Known))
      return false;
    if (Known)
      K.Variants.push_back(std::move(V));
  }
  return true;
}

struct RoleInfo {
  const char *Name;
  ParamRole Role;
  uint32_t Size; ///< of its type: control is a pointer, the rest u32
  bool InSlice, InPtb;
};

constexpr RoleInfo Roles[] = {
    {"slice_offset", ParamRole::SliceOffset, 4, true, false},
    {"grid_x", ParamRole::GridX, 4, true, true},
    {"grid_y", ParamRole::GridY, 4, true, true},
    {"grid_z", ParamRole::GridZ, 4, true, true},
    {"chunk", ParamRole::Chunk, 4, false, true},
    {"control", ParamRole::Control, 8, false, true},
};
constexpr size_t NumRoles = sizeof(Roles) / sizeof(Roles[0]);

bool Schema::readVariant(const Node &N, const KernelMetadata &K, VariantInfo &V,
                         bool &Known) {
  if (N.K != Node::Kind::Map)
    return fail(N, "a variant must be a mapping");
  std::string Kind;
  if (!getString(N, "kind", Kind, true))
    return false;
  if (Kind == "slice")
    V.Kind = VariantKind::Slice;
  else if (Kind == "ptb")
    V.Kind = VariantKind::Ptb;
  else
    return true; // a form this runtime does not know: not used
  Known = true;
  if (K.find(V.Kind))
    return fail(*N.get("kind"),
                "kernel '" + K.Name + "' has two " + Kind + " variants");
  if (!getString(N, "name", V.Name, true))
    return false;
  if (V.Name.empty())
    return fail(*N.get("name"), "empty variant name");
  if (!getU32(N, "original_param_bytes", V.OriginalParamBytes) ||
      !getU32(N, "param_bytes", V.ParamBytes))
    return false;
  if (V.ParamBytes > MaxParamBytes)
    return fail(*N.get("param_bytes"),
                "param_bytes " + std::to_string(V.ParamBytes) +
                    " exceeds CUDA's limit of " +
                    std::to_string(MaxParamBytes) + " bytes");
  if (V.OriginalParamBytes > V.ParamBytes)
    return fail(*N.get("original_param_bytes"),
                "original_param_bytes " + std::to_string(V.OriginalParamBytes) +
                    " exceeds param_bytes " + std::to_string(V.ParamBytes));

  bool Seen[NumRoles] = {};
  if (const Node *Ps = N.get("extra_params")) {
    if (Ps->K != Node::Kind::Seq)
      return fail(*Ps, "'extra_params' must be a sequence");
    for (const Node &PN : Ps->Kids) {
      if (PN.K != Node::Kind::Map)
        return fail(PN, "an extra parameter must be a mapping");
      std::string Role, Type;
      if (!getString(PN, "role", Role, true))
        return false;
      const Node &RoleNode = *PN.get("role");
      size_t R = 0;
      while (R < NumRoles && Role != Roles[R].Name)
        ++R;
      if (R == NumRoles)
        return fail(RoleNode, "unknown role '" + Role + "'");
      const RoleInfo &RI = Roles[R];
      if (!(V.Kind == VariantKind::Slice ? RI.InSlice : RI.InPtb))
        return fail(RoleNode,
                    "role '" + Role + "' is not used by " + Kind + " variants");
      if (Seen[R])
        return fail(RoleNode, "role '" + Role + "' appears twice");
      Seen[R] = true;
      if (!getString(PN, "type", Type, true))
        return false;
      const Node &TypeNode = *PN.get("type");
      uint32_t TypeSize = Type == "u32" ? 4 : Type == "u64" ? 8 : 0;
      if (!TypeSize)
        return fail(TypeNode, "unknown type '" + Type + "'");
      if (TypeSize != RI.Size)
        return fail(TypeNode, "role '" + Role + "' must have type " +
                                  (RI.Size == 4 ? "u32" : "u64"));
      ExtraParamSlot S{RI.Role, 0, 0};
      if (!getU32(PN, "offset", S.Offset) || !getU32(PN, "size", S.Size))
        return false;
      const Node &OffsetNode = *PN.get("offset");
      if (S.Size != TypeSize)
        return fail(*PN.get("size"), "size " + std::to_string(S.Size) +
                                         " does not match type " + Type);
      if (S.Offset % S.Size)
        return fail(OffsetNode, "offset " + std::to_string(S.Offset) +
                                    " is not a multiple of " +
                                    std::to_string(S.Size));
      if (S.Offset < V.OriginalParamBytes)
        return fail(OffsetNode, "offset " + std::to_string(S.Offset) +
                                    " is inside the original parameters (" +
                                    std::to_string(V.OriginalParamBytes) +
                                    " bytes)");
      if (uint64_t(S.Offset) + S.Size > V.ParamBytes)
        return fail(OffsetNode, "the parameter at offset " +
                                    std::to_string(S.Offset) +
                                    " ends past param_bytes (" +
                                    std::to_string(V.ParamBytes) + ")");
      for (const ExtraParamSlot &O : V.Extra)
        if (S.Offset < O.Offset + O.Size && O.Offset < S.Offset + S.Size)
          return fail(OffsetNode, "the parameter at offset " +
                                      std::to_string(S.Offset) +
                                      " overlaps the one at offset " +
                                      std::to_string(O.Offset));
      V.Extra.push_back(S);
    }
  }
  for (size_t R = 0; R < NumRoles; ++R)
    if ((V.Kind == VariantKind::Slice ? Roles[R].InSlice : Roles[R].InPtb) &&
        !Seen[R])
      return fail(N, Kind + " variant '" + V.Name + "' lacks the '" +
                         Roles[R].Name + "' parameter");
  return true;
}

} // namespace

bool parseModuleMetadata(std::string_view Text, ModuleMetadata &Out,
                         std::string &Error) {
  Out = ModuleMetadata();
  Error.clear();
  Node Root;
  Parser P(Text);
  if (!P.parseDocument(Root)) {
    Error = P.error();
    return false;
  }
  Schema S;
  ModuleMetadata M;
  if (!S.read(Root, M)) {
    Error = S.Err;
    return false;
  }
  Out = std::move(M);
  return true;
}

} // namespace tally::rt
