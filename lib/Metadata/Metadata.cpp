//===- Metadata.cpp - YAML form of the kernel metadata --------------------===//

#include "tally/Metadata/Metadata.h"

#include <yaml-cpp/yaml.h>

using namespace llvm;

namespace tally {

KernelRecord &Metadata::getOrAddKernel(StringRef Name) {
  for (KernelRecord &K : Kernels)
    if (K.Name == Name)
      return K;
  Kernels.emplace_back();
  Kernels.back().Name = Name.str();
  return Kernels.back();
}

const KernelRecord *Metadata::findKernel(StringRef Name) const {
  for (const KernelRecord &K : Kernels)
    if (K.Name == Name)
      return &K;
  return nullptr;
}

void Metadata::finalize() {
  for (KernelRecord &K : Kernels) {
    if (K.Variants.empty())
      K.Status = "rejected";
    else if (K.Reason.empty())
      K.Status = "transformed";
    else
      K.Status = "partial";
  }
}

static void emitResources(YAML::Emitter &Out, const std::vector<Resources> &Rs) {
  Out << YAML::Key << "resources" << YAML::Value << YAML::BeginSeq;
  for (const Resources &R : Rs) {
    Out << YAML::Flow << YAML::BeginMap;
    Out << YAML::Key << "arch" << YAML::Value << R.Arch;
    Out << YAML::Key << "registers" << YAML::Value << R.Registers;
    Out << YAML::Key << "shared" << YAML::Value << R.SharedBytes;
    Out << YAML::Key << "stack" << YAML::Value << R.StackBytes;
    Out << YAML::Key << "spill_stores" << YAML::Value << R.SpillStores;
    Out << YAML::Key << "spill_loads" << YAML::Value << R.SpillLoads;
    Out << YAML::Key << "max_threads" << YAML::Value << R.MaxThreadsPerBlock;
    Out << YAML::EndMap;
  }
  Out << YAML::EndSeq;
}

std::string Metadata::toYAML() const {
  YAML::Emitter Out;
  Out << YAML::BeginMap;
  Out << YAML::Key << "tally_metadata_version" << YAML::Value << FormatVersion;
  Out << YAML::Key << "kernels" << YAML::Value << YAML::BeginSeq;
  for (const KernelRecord &K : Kernels) {
    Out << YAML::BeginMap;
    Out << YAML::Key << "name" << YAML::Value << K.Name;
    Out << YAML::Key << "status" << YAML::Value << K.Status;
    if (!K.Reason.empty())
      Out << YAML::Key << "reason" << YAML::Value << K.Reason;
    if (K.ReadsGridSize)
      Out << YAML::Key << "reads_grid_size" << YAML::Value << true;
    if (!K.Notes.empty()) {
      Out << YAML::Key << "notes" << YAML::Value << YAML::BeginSeq;
      for (const std::string &N : K.Notes)
        Out << N;
      Out << YAML::EndSeq;
    }
    if (!K.OriginalRes.empty())
      emitResources(Out, K.OriginalRes);
    Out << YAML::Key << "variants" << YAML::Value << YAML::BeginSeq;
    for (const VariantRecord &V : K.Variants) {
      Out << YAML::BeginMap;
      Out << YAML::Key << "kind" << YAML::Value << V.Kind;
      Out << YAML::Key << "name" << YAML::Value << V.Name;
      Out << YAML::Key << "original_param_bytes" << YAML::Value << V.OriginalParamBytes;
      Out << YAML::Key << "param_bytes" << YAML::Value << V.ParamBytes;
      if (V.BarrierId)
        Out << YAML::Key << "barrier_id" << YAML::Value << *V.BarrierId;
      Out << YAML::Key << "extra_params" << YAML::Value << YAML::BeginSeq;
      for (const ExtraParam &P : V.ExtraParams) {
        Out << YAML::Flow << YAML::BeginMap;
        Out << YAML::Key << "name" << YAML::Value << P.Name;
        Out << YAML::Key << "role" << YAML::Value << P.Role;
        Out << YAML::Key << "type" << YAML::Value << P.Type;
        Out << YAML::Key << "offset" << YAML::Value << P.Offset;
        Out << YAML::Key << "size" << YAML::Value << P.Size;
        Out << YAML::EndMap;
      }
      Out << YAML::EndSeq;
      if (!V.Res.empty())
        emitResources(Out, V.Res);
      Out << YAML::EndMap;
    }
    Out << YAML::EndSeq;
    Out << YAML::EndMap;
  }
  Out << YAML::EndSeq;
  Out << YAML::EndMap;
  return std::string(Out.c_str()) + "\n";
}

static Error schemaError(const YAML::Node &N, const Twine &Msg) {
  auto M = N.Mark();
  return createStringError(inconvertibleErrorCode(), "metadata:%d:%d: %s",
                           M.line + 1, M.column + 1, Msg.str().c_str());
}

template <typename T>
static Error readScalar(const YAML::Node &Map, const char *Key, T &Out,
                        bool Required = true) {
  YAML::Node N = Map[Key];
  if (!N) {
    if (Required)
      return schemaError(Map, Twine("missing '") + Key + "'");
    return Error::success();
  }
  if (!N.IsScalar())
    return schemaError(N, Twine("'") + Key + "' must be a scalar");
  try {
    Out = N.as<T>();
  } catch (const YAML::Exception &E) {
    return schemaError(N, Twine("bad value for '") + Key + "'");
  }
  return Error::success();
}

static Error readResources(const YAML::Node &Map, std::vector<Resources> &Out) {
  YAML::Node L = Map["resources"];
  if (!L)
    return Error::success();
  if (!L.IsSequence())
    return schemaError(L, "'resources' must be a list");
  for (const YAML::Node &N : L) {
    Resources R;
    if (Error E = readScalar(N, "arch", R.Arch))
      return E;
    if (Error E = readScalar(N, "registers", R.Registers))
      return E;
    if (Error E = readScalar(N, "shared", R.SharedBytes, false))
      return E;
    if (Error E = readScalar(N, "stack", R.StackBytes, false))
      return E;
    if (Error E = readScalar(N, "spill_stores", R.SpillStores, false))
      return E;
    if (Error E = readScalar(N, "spill_loads", R.SpillLoads, false))
      return E;
    if (Error E = readScalar(N, "max_threads", R.MaxThreadsPerBlock, false))
      return E;
    Out.push_back(R);
  }
  return Error::success();
}

Expected<Metadata> Metadata::fromYAML(StringRef Text) {
  YAML::Node Root;
  try {
    Root = YAML::Load(Text.str());
  } catch (const YAML::Exception &E) {
    return createStringError(inconvertibleErrorCode(), "metadata:%d:%d: %s",
                             E.mark.line + 1, E.mark.column + 1, E.msg.c_str());
  }
  if (!Root.IsMap())
    return schemaError(Root, "metadata must be a map");
  unsigned Version = 0;
  if (Error E = readScalar(Root, "tally_metadata_version", Version))
    return std::move(E);
  if (Version != FormatVersion)
    return schemaError(Root, "unsupported metadata version " + Twine(Version));
  Metadata M;
  YAML::Node Ks = Root["kernels"];
  if (!Ks)
    return schemaError(Root, "missing 'kernels'");
  if (!Ks.IsSequence())
    return schemaError(Ks, "'kernels' must be a list");
  for (const YAML::Node &KN : Ks) {
    if (!KN.IsMap())
      return schemaError(KN, "a kernel must be a map");
    KernelRecord K;
    if (Error E = readScalar(KN, "name", K.Name))
      return std::move(E);
    if (Error E = readScalar(KN, "status", K.Status))
      return std::move(E);
    if (Error E = readScalar(KN, "reason", K.Reason, false))
      return std::move(E);
    if (YAML::Node G = KN["reads_grid_size"]) {
      if (!G.IsScalar() || (G.Scalar() != "true" && G.Scalar() != "false"))
        return schemaError(G, "'reads_grid_size' must be true or false");
      K.ReadsGridSize = G.Scalar() == "true";
    }
    if (YAML::Node Ns = KN["notes"]; Ns && Ns.IsSequence())
      for (const YAML::Node &N : Ns)
        K.Notes.push_back(N.as<std::string>(""));
    if (Error E = readResources(KN, K.OriginalRes))
      return std::move(E);
    YAML::Node Vs = KN["variants"];
    if (Vs && !Vs.IsSequence())
      return schemaError(Vs, "'variants' must be a list");
    for (const YAML::Node &VN : Vs) {
      VariantRecord V;
      if (Error E = readScalar(VN, "kind", V.Kind))
        return std::move(E);
      if (V.Kind != "slice" && V.Kind != "ptb")
        return schemaError(VN, "unknown variant kind '" + V.Kind + "'");
      if (Error E = readScalar(VN, "name", V.Name))
        return std::move(E);
      if (Error E = readScalar(VN, "original_param_bytes", V.OriginalParamBytes))
        return std::move(E);
      if (Error E = readScalar(VN, "param_bytes", V.ParamBytes))
        return std::move(E);
      if (VN["barrier_id"]) {
        unsigned Id = 0;
        if (Error E = readScalar(VN, "barrier_id", Id))
          return std::move(E);
        V.BarrierId = Id;
      }
      YAML::Node Ps = VN["extra_params"];
      if (Ps && !Ps.IsSequence())
        return schemaError(Ps, "'extra_params' must be a list");
      for (const YAML::Node &PN : Ps) {
        ExtraParam P;
        if (Error E = readScalar(PN, "name", P.Name))
          return std::move(E);
        if (Error E = readScalar(PN, "role", P.Role))
          return std::move(E);
        if (Error E = readScalar(PN, "type", P.Type))
          return std::move(E);
        if (Error E = readScalar(PN, "offset", P.Offset))
          return std::move(E);
        if (Error E = readScalar(PN, "size", P.Size))
          return std::move(E);
        V.ExtraParams.push_back(P);
      }
      if (Error E = readResources(VN, V.Res))
        return std::move(E);
      K.Variants.push_back(std::move(V));
    }
    M.Kernels.push_back(std::move(K));
  }
  return std::move(M);
}

} // namespace tally
