"""Which framework the step runs under, and each fix written in that framework's own API.

A step driven by `transformers.Trainer`, `generate()`, Lightning or accelerate is changed through that
framework's arguments, not by editing a training loop the user never wrote. The framework is
recognised from what the capture saw (a library frame such as `transformers/trainer.py
training_step` in the Python stack samples, or in the trace's `python_function` events when it was
recorded with_stack=True), else from the classes of the models the capture child found
(`transformers.models…`, `timm.models…`, `torchvision.models…`). A library that was merely imported
is not evidence: transformers imports torchvision.

`in_framework_api` makes a finding anew with its fixes rewritten: a fix with a variant for the recognised
framework gets that code, headed by a comment naming the framework and the evidence; other fixes keep their
plain PyTorch code.
"""

from __future__ import annotations

import dataclasses

import msgspec

from diagnose.model.findings import Finding
from diagnose.model.fixes import comment

IMPORT_TIME = "<module>"


@dataclasses.dataclass(frozen=True)
class Framework:
    """A framework the step runs under: `key` (e.g. "transformers.Trainer") and what showed it."""

    key: str
    evidence: str
    compiled: bool = False  # the step already runs torch.compile'd code (a variant of the API may say so)


LIGHTNING_RUN = frozenset(
    {
        "fit",
        "_fit_impl",
        "_run",
        "_run_stage",
        "run",
        "advance",
        "training_step",
        "optimizer_step",
        "backward",
        "on_run_start",
    }
)
# key, file path fragment, the functions that show the step runs under it (None: any function at run time)
SIGNATURES: tuple[tuple[str, str, frozenset | None], ...] = (
    (
        "transformers.Trainer",
        "transformers/trainer.py",
        frozenset({"train", "_inner_training_loop", "training_step", "compute_loss"}),
    ),
    (
        "transformers.generate",
        "transformers/generation/utils.py",
        frozenset({"generate", "_sample", "_beam_search", "_assisted_decoding", "_prefill"}),
    ),
    ("lightning", "lightning/pytorch/", LIGHTNING_RUN),
    ("lightning", "pytorch_lightning/", LIGHTNING_RUN),
    ("accelerate", "accelerate/accelerator.py", frozenset({"backward", "accumulate", "autocast", "clip_grad_norm_"})),
    ("timm", "timm/models/", None),
    ("torchvision", "torchvision/models/", None),
)
MODEL_MODULES = (("transformers.", "transformers"), ("timm.", "timm"), ("torchvision.models", "torchvision"))


def _match(file: str, function: str) -> str | None:
    path = file.replace("\\", "/")
    if function == IMPORT_TIME:
        return None
    for key, fragment, functions in SIGNATURES:
        if fragment in path and (functions is None or function in functions):
            return key
    return None


def from_frames(frames, where: str) -> list[Framework]:
    """Frameworks shown by (file, function) pairs, in SIGNATURES order, each with its first frame."""
    found: dict[str, str] = {}
    for file, function in frames:
        key = _match(str(file), str(function))
        if key and key not in found:
            short = str(file).replace("\\", "/")
            cut = short.rfind("site-packages/")
            found[key] = f"{where}: {short[cut + 14 :] if cut >= 0 else short} {function}"
    order = [k for k, _, _ in SIGNATURES]
    return [Framework(k, found[k]) for k in sorted(found, key=order.index)]


def _model_frameworks(trace) -> list[Framework]:
    workload = (trace.capture or {}).get("workload") or {}
    out: list[Framework] = []
    for model in workload.get("models") or []:
        module = str(model.get("module") or "")
        for prefix, key in MODEL_MODULES:
            if module.startswith(prefix) and key not in [f.key for f in out]:
                out.append(Framework(key, f"the model {model.get('class')} is {module}"))
    return out


def detect_frameworks(trace, samples=None, compiled: bool = False) -> list[Framework]:
    """The frameworks the step runs under, most specific first (a Trainer before the model it trains), from
    the frames of its Python `samples` (Metrics.python_samples: the capture's stack samples or the trace's
    python_function events) and the models the capture found; `compiled`: the measured steps enter
    torch.compile'd regions."""
    found = []
    if samples is not None:
        where = "python_function events" if samples.from_trace else "Python stack samples"
        found = from_frames(samples.frames, where)
    found += [f for f in _model_frameworks(trace) if f.key not in {g.key for g in found}]
    return [dataclasses.replace(f, compiled=compiled) for f in found] if compiled else found


def family(key: str) -> str:
    """The library a framework key belongs to ("transformers.Trainer" → "transformers")."""
    return key.split(".")[0]


# fix id -> framework key (or library) -> code in that API
API_CODE: dict[str, dict[str, str]] = {
    "bf16-tensor-cores": {
        "transformers.Trainer": (
            "args = TrainingArguments(..., bf16=True)  # bf16 autocast\n"
            "# tf32=True as well lets what stays fp32 use TF32 tensor cores"
        ),
        "lightning": 'trainer = L.Trainer(..., precision="bf16-mixed")',
        "accelerate": 'accelerator = Accelerator(mixed_precision="bf16")',
    },
    "dataloader-workers": {
        "transformers.Trainer": (
            "args = TrainingArguments(..., dataloader_num_workers=8, dataloader_pin_memory=True,\n"
            "                         dataloader_persistent_workers=True)"
        ),
        "lightning": (
            "def train_dataloader(self):  # in the LightningModule or LightningDataModule\n"
            "    return DataLoader(dataset, batch_size=..., num_workers=8, pin_memory=True,\n"
            "                      persistent_workers=True)"
        ),
    },
    "pinned-memory": {
        "transformers.Trainer": "args = TrainingArguments(..., dataloader_pin_memory=True, dataloader_num_workers=8)",
        "lightning": "DataLoader(dataset, ..., pin_memory=True, num_workers=8)  # returned by train_dataloader()",
    },
    "torch-compile": {
        "transformers.Trainer": "args = TrainingArguments(..., torch_compile=True)",
        "lightning": "model = torch.compile(MyLightningModule())\ntrainer.fit(model, datamodule)",
        "transformers.generate": (
            'model.generation_config.cache_implementation = "static"  # compiled decoding\n'
            "out = model.generate(**inputs, max_new_tokens=...)"
        ),
    },
    "fused-optimizer": {
        "transformers.Trainer": 'args = TrainingArguments(..., optim="adamw_torch_fused")',
        "lightning": (
            "def configure_optimizers(self):\n    return torch.optim.AdamW(self.parameters(), lr=..., fused=True)"
        ),
    },
    "flash-attention": {
        "transformers": (
            'model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="sdpa")\n'
            '# or attn_implementation="flash_attention_2" with the flash-attn package'
        ),
    },
    "cuda-graphs": {
        "transformers.generate": (
            'out = model.generate(**inputs, max_new_tokens=..., cache_implementation="static")\n'
            "# a static cache has fixed shapes, so transformers compiles the decoding forward\n"
            '# (torch.compile mode="reduce-overhead": CUDA graphs); GenerationConfig.compile_config\n'
            "# tunes it"
        ),
        "lightning": (
            'model = torch.compile(MyLightningModule(), mode="reduce-overhead")  # CUDA graphs\n'
            "trainer.fit(model, datamodule)"
        ),
    },
    "static-shapes": {
        "transformers.generate": (
            'out = model.generate(**inputs, max_new_tokens=..., cache_implementation="static")\n'
            "# StaticCache preallocates max_length positions: no torch.cat per token"
        ),
    },
    "remove-sync": {
        "transformers.generate": (
            "# these syncs are generate()'s own per-token checks (stopping criteria, EOS):\n"
            "# they stay between graphed forwards. Compile the forward instead:\n"
            'out = model.generate(**inputs, max_new_tokens=..., cache_implementation="static")'
        ),
    },
    "channels-last": {
        "timm": (
            "model = model.to(memory_format=torch.channels_last)\n"
            "images = images.to(memory_format=torch.channels_last)  # each batch"
        ),
        "torchvision": (
            "model = model.to(memory_format=torch.channels_last)\n"
            "images = images.to(memory_format=torch.channels_last)  # each batch"
        ),
        "lightning": (
            "def on_fit_start(self):\n    self.to(memory_format=torch.channels_last)\n"
            "def training_step(self, batch, i):\n"
            "    images = batch[0].to(memory_format=torch.channels_last)"
        ),
    },
}


_GENERATE_COMPILED = (
    "# generate() already runs the decoding forward compiled (a static cache: torch.compile'd regions\n"
    "# in every step); the idle left is generate()'s own per-token Python between the forwards,\n"
)
# fix id -> framework key -> code, when the step already runs compiled code: what is left to change
COMPILED_API_CODE: dict[str, dict[str, str]] = {
    "cuda-graphs": {
        "transformers.generate": _GENERATE_COMPILED
        + (
            "# which no cache option removes. Decode more sequences per call, or drive the compiled\n"
            "# forward from a loop of your own captured whole (gpt-fast style):\n"
            'out = model.generate(**batched_inputs, max_new_tokens=..., cache_implementation="static")'
        ),
    },
    "remove-sync": {
        "transformers.generate": _GENERATE_COMPILED
        + (
            "# and its stopping checks read a flag back each token. With a fixed length there is less to check:\n"
            "out = model.generate(**inputs, max_new_tokens=N, min_new_tokens=N)  # no early EOS stop"
        ),
    },
    "static-shapes": {
        "transformers.generate": _GENERATE_COMPILED + "# and the cache is already static: nothing to change here"
    },
}


def api_code(fix_id: str, frameworks: list[Framework]) -> tuple[str, Framework] | None:
    """The code of `fix_id` in the API of the first framework that has it (by key, then by library); a
    framework whose step already runs compiled code takes the variant that says what is left."""
    for framework in frameworks:
        variants = (COMPILED_API_CODE.get(fix_id) or {}) if framework.compiled else {}
        if framework.key in variants:
            return variants[framework.key], framework
    variants = API_CODE.get(fix_id) or {}
    for framework in frameworks:
        for key in (framework.key, family(framework.key)):
            if key in variants:
                return variants[key], framework
    return None


def in_framework_api(finding: Finding, frameworks: list[Framework]) -> Finding:
    """A new Finding: `finding` with each fix that has a variant for the recognised framework written in its API
    (`finding` itself is left as it is; the same Finding when no fix has a variant)."""
    if not frameworks:
        return finding
    fixes, changed = [], False
    for item in finding.fixes:
        found = api_code(item.id, frameworks)
        if found is not None:
            code, framework = found
            item = msgspec.structs.replace(
                item, code=f"{comment(f'{framework.key} ({framework.evidence})')}{code}", api=framework.key
            )
            changed = True
        fixes.append(item)
    return msgspec.structs.replace(finding, fixes=fixes) if changed else finding
