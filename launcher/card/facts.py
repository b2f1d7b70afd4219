"""HOW FAST a card is, and what it can run: the card table, by the name NVML reports.

For every card the project names: its memory (NVML's total, GiB), peak memory bandwidth (GB/s, decimal), dense
16-bit tensor throughput (TFLOPS, no 2:4 sparsity; fp32 accumulate, which is half the fp16-accumulate rate on
GeForce boards; cards without bfloat16 give their fp16 rate; Pascal and older their non-tensor fp16 rate) and
compute capability. Each figure names its source (SOURCES): `sources` is (memory, bandwidth, throughput,
capability). The step-time model (launcher.plan.speed) reads bandwidth and throughput; a what-if card
(--gpu-name) takes its capability from here, so a card below the image's minimum is refused as when NVML
reports it. A name not in the table gets DEFAULT's speed, and the plan says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CardFacts:
    name: str  # as NVML reports it
    memory_gib: float | None  # NVML memory.total / 2^30 (None: unified memory, none dedicated)
    bandwidth_gb_s: float  # peak DRAM bandwidth, 10^9 B/s
    tflops_16bit: float  # dense 16-bit tensor throughput, 10^12 FLOP/s
    capability: tuple[int, int]
    sources: tuple[str, str, str, str]  # keys of SOURCES: memory, bandwidth, throughput, capability
    aliases: tuple[str, ...] = field(default=())

    @property
    def known(self) -> bool:
        return self.name != DEFAULT.name

    def source_text(self) -> dict:
        kinds = ("memory", "bandwidth", "throughput", "capability")
        return {kind: SOURCES.get(key, key) for kind, key in zip(kinds, self.sources)}


SOURCES = {
    "cc": "https://developer.nvidia.com/cuda-gpus",
    "smi": "memory.total as nvidia-smi prints it, in logs published in public repositories",
    "t4": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
    "a100": "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
    "ampere_wp": "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf",
    "ga102_wp": "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
    "h100": "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
    "hopper_wp": "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper",
    "h200": "https://www.nvidia.com/en-us/data-center/h200/",
    "gh200": "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
    "hgx": "https://www.nvidia.com/en-us/data-center/hgx/",
    "dgx_b200": "https://www.nvidia.com/en-us/data-center/dgx-b200/",
    "gb200": "https://www.nvidia.com/en-us/data-center/gb200-nvl72/",
    "spark": "https://www.nvidia.com/en-us/products/workstations/dgx-spark/",
    "l4": "https://www.nvidia.com/en-us/data-center/l4/",
    "l40s": "https://www.nvidia.com/en-us/data-center/l40s/",
    "l40": "https://www.nvidia.com/en-us/data-center/l40/",
    "ada_wp": "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
    "rtx_bw_wp": "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf",
    "turing_wp": "https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf",
    "volta_v100": "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
    "p100": "https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-PCIe-datasheet.pdf",
    "pascal_wp": "https://images.nvidia.com/content/pdf/tesla/whitepaper/pascal-architecture-whitepaper.pdf",
    "a10": "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
    "a10g": "https://aws.amazon.com/ec2/instance-types/g5/ ; https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
    "a40": "https://www.nvidia.com/en-us/data-center/a40/",
    "a30": "https://www.nvidia.com/en-us/data-center/products/a30-gpu/",
    "a16": "https://www.nvidia.com/en-us/data-center/products/a16-gpu/",
    "a2": "https://www.nvidia.com/en-us/data-center/products/a2/",
    "rtx_a6000": "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
    "rtx_a5000": "https://www.nvidia.com/en-us/design-visualization/rtx-a5000/",
    "rtx_a4000": "https://www.nvidia.com/en-us/design-visualization/rtx-a4000/",
    "rtx6000ada": "https://www.nvidia.com/en-us/design-visualization/rtx-6000/",
    "rtxpro6000": "https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/",
    "rtxpro6000_server": "https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/",
    "geforce50": "https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/",
    "geforce40": "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/",
    "techpowerup": "https://www.techpowerup.com/gpu-specs/",
    "runpod": "RunPod GPU type ids, which are the NVML names, with their memory",
    "h200nvl_memory": "nominal 141 GB, taken as the H200 SXM figure",
    "ga10x_derived": "derived from GA10x tensor-core rate in the GA102 whitepaper and TechPowerUp clocks",
    "tpu_k80": "https://www.techpowerup.com/gpu-specs/tesla-k80.c2616",
    "nominal": "the nominal capacity (MiB not checked against a printout)",
    "mlcommons_gb200": "MLCommons v6.1 system json: 'NVIDIA GB200', 186 GB HBM3e",
    "as_h100": "taken as the H100 80GB HBM3 (same board, export variant)",
    "hf_h20": "https://huggingface.co/hardware/h20",
    "reported": "reported by cloud vendors (no NVIDIA datasheet)",
    "as_a100_80": "taken as the A100-SXM4-80GB (same board, export variant)",
    "mig": "a MIG slice (NVML's 'MIG <c>c.<g>g.<N>gb'): its memory N GB as its profile names it, at most the "
    "card's; its compute the slice's share of the card's (g of 7 slices, of 4 on A30 and RTX PRO 6000); its "
    "bandwidth its memory's share of the card's",
}

CARDS: tuple[CardFacts, ...] = (
    CardFacts("Tesla T4", 15.0, 320, 65, (7, 5), ("smi", "t4", "t4", "cc")),
    CardFacts("NVIDIA A100-SXM4-40GB", 40.0, 1555, 312, (8, 0), ("smi", "a100", "a100", "cc"), aliases=("A100 40GB",)),
    CardFacts("NVIDIA A100-SXM4-80GB", 80.0, 2039, 312, (8, 0), ("smi", "a100", "a100", "cc"), aliases=("A100 80GB",)),
    CardFacts("NVIDIA A100-PCIE-40GB", 40.0, 1555, 312, (8, 0), ("smi", "a100", "a100", "cc")),
    CardFacts("NVIDIA A100 80GB PCIe", 80.0, 1935, 312, (8, 0), ("smi", "a100", "a100", "cc")),
    CardFacts("NVIDIA H100 80GB HBM3", 79.65, 3350, 989.4, (9, 0), ("smi", "h100", "hopper_wp", "cc")),
    CardFacts("NVIDIA H100 PCIe", 79.65, 2000, 756, (9, 0), ("smi", "h100", "h100", "cc")),
    CardFacts("NVIDIA H100 NVL", 93.58, 3900, 835.5, (9, 0), ("smi", "h100", "h100", "cc")),
    CardFacts("NVIDIA H200", 140.4, 4800, 989.4, (9, 0), ("smi", "h200", "h200", "cc")),
    CardFacts("NVIDIA H200 NVL", 140.4, 4800, 835.5, (9, 0), ("h200nvl_memory", "h200", "h200", "cc")),
    CardFacts("NVIDIA L4", 22.49, 300, 121, (8, 9), ("smi", "l4", "l4", "cc")),
    CardFacts("NVIDIA A10G", 22.49, 600, 70, (8, 6), ("smi", "a10g", "a10g", "cc")),
    CardFacts("NVIDIA A10", 22.49, 600, 125, (8, 6), ("smi", "a10", "a10", "cc")),
    CardFacts("NVIDIA L40S", 44.99, 864, 362.05, (8, 9), ("smi", "l40s", "l40s", "cc")),
    CardFacts("NVIDIA L40", 44.99, 864, 181.05, (8, 9), ("smi", "l40", "l40", "cc")),
    CardFacts("NVIDIA RTX A6000", 47.99, 768, 154.8, (8, 6), ("smi", "rtx_a6000", "ga102_wp", "cc")),
    CardFacts("NVIDIA RTX 6000 Ada Generation", 47.99, 960, 364.2, (8, 9), ("smi", "rtx6000ada", "ada_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 3090", 24.0, 936, 71, (8, 6), ("smi", "ga102_wp", "ga102_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 4090", 23.99, 1008, 165.2, (8, 9), ("smi", "ada_wp", "ada_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 5090", 31.84, 1792, 209.5, (12, 0), ("smi", "geforce50", "rtx_bw_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 3060", 12.0, 360, 25.5, (8, 6), ("smi", "techpowerup", "ga10x_derived", "cc")),
    CardFacts("NVIDIA GeForce RTX 4060 Ti", 16.0, 288, 44.1, (8, 9), ("smi", "geforce40", "geforce40", "cc")),
    CardFacts("NVIDIA GeForce RTX 2080 Ti", 11.0, 616, 53.8, (7, 5), ("smi", "turing_wp", "turing_wp", "cc")),
    CardFacts("Tesla V100-SXM2-16GB", 16.0, 900, 125, (7, 0), ("smi", "volta_v100", "volta_v100", "cc")),
    CardFacts("Tesla V100-SXM2-32GB", 32.0, 900, 125, (7, 0), ("smi", "volta_v100", "volta_v100", "cc")),
    CardFacts("Tesla V100-PCIE-16GB", 16.0, 900, 112, (7, 0), ("runpod", "volta_v100", "volta_v100", "cc")),
    CardFacts("Tesla P100-PCIE-16GB", 16.0, 732, 18.7, (6, 0), ("smi", "p100", "p100", "cc")),
    CardFacts("Tesla K80", 11.17, 240, 4.37, (3, 7), ("smi", "tpu_k80", "tpu_k80", "cc")),
    CardFacts("NVIDIA B200", 179.06, 8000, 2250, (10, 0), ("smi", "hgx", "dgx_b200", "cc")),
    CardFacts("NVIDIA GH200 480GB", 95.58, 4000, 989.4, (9, 0), ("smi", "gh200", "gh200", "cc")),
    CardFacts("NVIDIA A40", 44.99, 696, 149.7, (8, 6), ("smi", "a40", "a40", "cc")),
    CardFacts("NVIDIA A30", 24.0, 933, 165, (8, 0), ("smi", "a30", "a30", "cc")),
    CardFacts(
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        95.59,
        1792,
        503.8,
        (12, 0),
        ("smi", "rtxpro6000", "rtx_bw_wp", "cc"),
    ),
    CardFacts(
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        95.59,
        1792,
        503.8,
        (12, 0),
        ("smi", "rtxpro6000_server", "rtx_bw_wp", "cc"),
    ),
    CardFacts(
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        95.59,
        1792,
        438.9,
        (12, 0),
        ("smi", "rtxpro6000", "rtxpro6000", "cc"),
    ),
    CardFacts("NVIDIA RTX A5000", 24.0, 768, 111.1, (8, 6), ("runpod", "rtx_a5000", "rtx_a5000", "cc")),
    CardFacts("NVIDIA RTX A4000", 16.0, 448, 76.7, (8, 6), ("runpod", "rtx_a4000", "rtx_a4000", "cc")),
    CardFacts("NVIDIA TITAN RTX", 24.0, 672, 130, (7, 5), ("nominal", "turing_wp", "turing_wp", "cc")),
    CardFacts("NVIDIA TITAN V", 12.0, 652.8, 110, (7, 0), ("nominal", "techpowerup", "techpowerup", "cc")),
    CardFacts("NVIDIA GeForce RTX 5080", 16.0, 960, 112.6, (12, 0), ("runpod", "geforce50", "rtx_bw_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 4080", 16.0, 716.8, 97.5, (8, 9), ("runpod", "ada_wp", "ada_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 4070", 12.0, 504, 58.3, (8, 9), ("nominal", "geforce40", "geforce40", "cc")),
    CardFacts("NVIDIA GeForce RTX 4060", 8.0, 272, 30.2, (8, 9), ("nominal", "geforce40", "geforce40", "cc")),
    CardFacts("NVIDIA GeForce RTX 3080", 10.0, 760, 59.5, (8, 6), ("runpod", "ga102_wp", "ga102_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 3070", 8.0, 448, 40.6, (8, 6), ("runpod", "ga102_wp", "ga102_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 2080", 8.0, 448, 40.3, (7, 5), ("nominal", "turing_wp", "turing_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 2070", 8.0, 448, 29.9, (7, 5), ("nominal", "turing_wp", "turing_wp", "cc")),
    CardFacts("NVIDIA GeForce RTX 2060", 6.0, 336, 25.8, (7, 5), ("nominal", "turing_wp", "turing_wp", "cc")),
    CardFacts("NVIDIA GeForce GTX 1080", 8.0, 320, 0.139, (6, 1), ("nominal", "pascal_wp", "techpowerup", "cc")),
    CardFacts("NVIDIA GeForce GTX 1070", 8.0, 256, 0.101, (6, 1), ("nominal", "techpowerup", "techpowerup", "cc")),
    CardFacts("NVIDIA GB200", 186.0, 8000, 2500, (10, 0), ("mlcommons_gb200", "gb200", "gb200", "cc")),
    CardFacts("NVIDIA GB10", None, 273, 62.5, (12, 1), ("spark", "spark", "spark", "cc")),
    CardFacts("NVIDIA B100", 180.0, 8000, 1750, (10, 0), ("hgx", "hgx", "hgx", "cc")),
    CardFacts("NVIDIA H800", 79.65, 3350, 989.4, (9, 0), ("as_h100", "h100", "h100", "cc")),
    CardFacts("NVIDIA H20", 96.0, 4000, 148, (9, 0), ("hf_h20", "reported", "hf_h20", "cc")),
    CardFacts("NVIDIA A800-SXM4-80GB", 80.0, 2039, 312, (8, 0), ("as_a100_80", "a100", "a100", "cc")),
    CardFacts("NVIDIA A16", 16.0, 200, 18.0, (8, 6), ("a16", "a16", "a16", "cc")),
    CardFacts("NVIDIA A2", 16.0, 200, 18, (8, 6), ("a2", "a2", "a2", "cc")),
    CardFacts("Tesla P40", 24.0, 346, 0.18, (6, 1), ("nominal", "techpowerup", "techpowerup", "cc")),
    CardFacts("Tesla P4", 8.0, 192, 0.09, (6, 1), ("nominal", "techpowerup", "techpowerup", "cc")),
)


# A card the table does not name: the slowest supported class in it (an RTX 4060's 272 GB/s, an RTX 3060's 25.5
# TFLOPS), so that a time planned for it errs long, not short. Its capability is never read from here.
DEFAULT = CardFacts("unknown card", None, 272.0, 25.5, (7, 5), ("nominal", "geforce40", "ga10x_derived", "cc"))

_VENDOR_WORDS = re.compile(r"\b(nvidia|tesla|geforce|quadro)\b")


def normalized(name: str) -> str:
    """A card name as compared: full-width letters as plain ones (NFKC), lower case, without the vendor words
    NVML adds, dashes as spaces."""
    import unicodedata

    text = _VENDOR_WORDS.sub(" ", unicodedata.normalize("NFKC", name).lower()).replace("-", " ").replace("_", " ")
    return " ".join(text.split())


_RUN_TOGETHER = re.compile(r"^(rtx|gtx|quadro|titan)(\d)")


def _spaced(normal: str) -> str:
    """A model word typed run together with its series (`rtx4090`, `rtx 4090ti`) as the table writes it."""
    words = [_RUN_TOGETHER.sub(r"\1 \2", word) for word in normal.split()]
    text = " ".join(words)
    return re.sub(r"(\d)(ti|super)\b", r"\1 \2", text)


def _family(normal: str) -> tuple[str, ...]:
    """The words that name a card's model: up to the first with a digit ("rtx 4090", "a100", "rtx pro 6000")."""
    words = normal.split()
    for index, word in enumerate(words):
        if any(ch.isdigit() for ch in word):
            return tuple(words[: index + 1])
    return tuple(words)


_BY_NAME = {normalized(n): card for card in CARDS for n in (card.name, *card.aliases)}


def card_facts(name: str | None, memory_gib: float | None = None) -> CardFacts | None:
    """The table's card for a name NVML reports (or a user types: "RTX 4090", "A100 40GB", "Tesla T4"), None
    when no card of that model is listed. An inexact name picks, among the cards of its model, the one sharing
    most of its words, then the one whose memory is nearest `memory_gib`. A MIG slice ("NVIDIA H100 80GB HBM3
    MIG 1g.10gb") is its card's share (mig_slice), None when the name does not say which slice."""
    if not name or not name.strip():
        return None
    normal = _MIG_RUN_TOGETHER.sub("mig ", normalized(name))
    if "mig" in normal.split():
        return mig_slice(normal)
    return _listed(normal, memory_gib)


def _listed(normal: str, memory_gib: float | None) -> CardFacts | None:
    """The table's card for a normalized name (card_facts, without MIG)."""
    exact = _BY_NAME.get(normal) or _BY_NAME.get(_spaced(normal))
    if exact is not None:
        return exact
    normal = _spaced(normal)
    words = set(normal.split())
    matches = [card for card in CARDS if set(_family(normalized(card.name))) <= words]
    if not matches:
        return None

    def score(card):
        shared = len(words & set(normalized(card.name).split()))
        distance = abs((card.memory_gib or 0.0) - memory_gib) if memory_gib and card.memory_gib else 0.0
        return (-shared, distance)

    return min(matches, key=score)


# ---------------------------------------------------------------------------------------------------
# MIG: a slice of a card is a card of its own, with a share of the card's memory, bandwidth and compute

# "MIG1g.10gb", typed run together
_MIG_RUN_TOGETHER = re.compile(r"\bmig(?=\d)")
# NVML's MIG profile: [<c>c.]<g>g.<N>gb[+me|+gfx...]: c compute slices of a g-slice instance, N GB of memory
_MIG_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:\+[a-z]+)*$")
# The compute slices a whole card is cut into: 7 (A100, A800, H100, H800, H20, H200, GH200, B200, GB200), except
# for the cards whose largest instance is 4g
_COMPUTE_SLICES = {"a30": 4, "rtx pro 6000": 4}
_GB = 1e9 / 1024**3  # GiB in a decimal GB


def compute_slices(card: CardFacts) -> int:
    """How many compute slices MIG cuts `card` into (its full instance's g)."""
    family = " ".join(_family(normalized(card.name)))
    return _COMPUTE_SLICES.get(family, 7)


def mig_slice(normal: str) -> CardFacts | None:
    """The facts of a MIG slice, from its normalized name ("h100 80gb hbm3 mig 1g.10gb"): the card it is cut
    from (the words before "mig"), with the memory its profile names (at most the card's), the compute share
    of its slices (c, else g, of compute_slices) and the bandwidth share of its memory. None when the card is
    not in the table or the name gives no profile the slice can be read from (its speed is then the
    default's, which errs long)."""
    words = normal.split()
    at = words.index("mig")
    profile = next((m for m in map(_MIG_PROFILE.match, words[at + 1 :]) if m), None)
    if profile is None or at == 0:
        return None
    compute, instance, gb = (int(x) if x else 0 for x in profile.groups())
    slices = compute or instance
    if slices < 1 or instance < 1 or gb < 1:
        return None
    # a card named by its model alone ("A100 MIG 1g.10gb"): the one whose memory the slice is a share of
    parent = _listed(" ".join(words[:at]), gb * _GB * 7 / instance)
    if parent is None or not parent.memory_gib:
        return None
    total = compute_slices(parent)
    if compute > instance or instance > total or gb * _GB > parent.memory_gib * 1.05:
        return None  # no slice of this card: a typo, planned as a card the table does not know
    memory = min(parent.memory_gib, gb * _GB)
    compute_share = min(1.0, slices / total)
    memory_share = min(1.0, memory / parent.memory_gib)
    return CardFacts(
        f"{parent.name} MIG {profile.group(0)}",
        round(memory, 2),
        parent.bandwidth_gb_s * memory_share,
        parent.tflops_16bit * compute_share,
        parent.capability,
        ("mig", "mig", "mig", parent.sources[3]),
    )


# ---------------------------------------------------------------------------------------------------
# The cards like one the table does not name

# A card of about this memory: within 15% of it either way (24 GiB: the L4, A10, RTX 3090 and 4090 classes)
CLASS_SPREAD = 1.15


def cards_like(memory_gib: float | None, min_capability: tuple[int, int] = (0, 0)) -> tuple[CardFacts, ...]:
    """The table's cards with about `memory_gib` of memory (within CLASS_SPREAD either way) and at least
    `min_capability`: what a card the table does not name, with that memory, may be. Empty when none is
    near (or the memory is not known)."""
    if not memory_gib or memory_gib <= 0:
        return ()
    low, high = memory_gib / CLASS_SPREAD, memory_gib * CLASS_SPREAD
    return tuple(
        card
        for card in CARDS
        if card.memory_gib is not None and low <= card.memory_gib <= high and card.capability >= min_capability
    )
