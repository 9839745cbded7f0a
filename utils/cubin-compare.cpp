//===- cubin-compare.cpp - compare the machine code of two cubins ---------===//
//
// Usage: cubin-compare A.cubin B.cubin
// Exits 0 when both ELF files have the same set of `.text.*` and `.nv.info*`
// sections with byte-identical contents; prints the first difference and
// exits 1 otherwise. Other sections (debug line tables, the embedded PTX
// text) legitimately differ between a PTX file and its re-printed form.
//
//===----------------------------------------------------------------------===//

#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

using namespace llvm;
using namespace llvm::object;

static Expected<std::map<std::string, std::string>> codeSections(StringRef Path,
                                                                 OwningBinary<Binary> &Keep) {
  auto Bin = createBinary(Path);
  if (!Bin)
    return Bin.takeError();
  auto *Obj = dyn_cast<ObjectFile>(Bin->getBinary());
  if (!Obj)
    return createStringError(inconvertibleErrorCode(), "%s: not an object file",
                             Path.str().c_str());
  std::map<std::string, std::string> Out;
  for (const SectionRef &S : Obj->sections()) {
    auto Name = S.getName();
    if (!Name)
      return Name.takeError();
    if (!Name->starts_with(".text.") && !Name->starts_with(".nv.info"))
      continue;
    auto Data = S.getContents();
    if (!Data)
      return Data.takeError();
    Out[Name->str()] = Data->str();
  }
  Keep = std::move(*Bin);
  return Out;
}

int main(int argc, char **argv) {
  InitLLVM X(argc, argv);
  if (argc != 3) {
    errs() << "usage: cubin-compare A.cubin B.cubin\n";
    return 2;
  }
  OwningBinary<Binary> KA, KB;
  auto A = codeSections(argv[1], KA);
  auto B = codeSections(argv[2], KB);
  if (!A || !B) {
    if (!A)
      logAllUnhandledErrors(A.takeError(), WithColor::error(errs(), "cubin-compare"));
    if (!B)
      logAllUnhandledErrors(B.takeError(), WithColor::error(errs(), "cubin-compare"));
    return 2;
  }
  if (A->empty()) {
    errs() << "cubin-compare: " << argv[1] << " has no .text/.nv.info sections\n";
    return 1;
  }
  for (auto &[Name, Data] : *A) {
    auto It = B->find(Name);
    if (It == B->end()) {
      errs() << "section " << Name << " missing from " << argv[2] << '\n';
      return 1;
    }
    if (It->second != Data) {
      errs() << "section " << Name << " differs\n";
      return 1;
    }
  }
  for (auto &[Name, Data] : *B)
    if (!A->count(Name)) {
      errs() << "section " << Name << " missing from " << argv[1] << '\n';
      return 1;
    }
  outs() << "identical: " << A->size() << " sections\n";
  return 0;
}
