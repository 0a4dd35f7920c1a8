"""moe_align_block_size: reference, oracle, check and comparator.

Outputs (vLLM semantics, -1 for unused blocks):
  sorted_token_ids [T*k + E*(block-1)] int32: the flat pair indices row*k + j of topk_ids
      grouped by expert in expert order, each group padded with the sentinel T*k up to a
      multiple of block; every slot past the padded total holds the sentinel too.
  expert_ids [cdiv(T*k + E*(block-1), block)] int32: the expert of each used block, -1 after.
  num_tokens_post_pad [1] int32: the padded total (sum over experts of the padded counts).
The order of the pair indices inside one expert's group is not defined; `check` compares the
rest exactly and the groups as multisets.
"""

import torch


def make_inputs(workload, seed, device):
    """Router-like top-k ids: distinct within a row, a skewed load, some experts never chosen."""
    p = workload.params
    T, k, E, block = int(p["T"]), int(p["k"]), int(p["E"]), int(p["block"])
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    # Skewed popularity: log-normal weights (hot experts carry several times the mean load).
    log_w = 0.8 * torch.randn(E, generator=g, device=device)
    # About one expert in eight gets no token at all (always at least one, never so many that
    # fewer than k experts remain).
    num_dead = min(max(1, E // 8), E - k)
    dead = torch.randperm(E, generator=g, device=device)[:num_dead]
    log_w[dead] = float("-inf")
    # Gumbel top-k = sampling k distinct experts per row without replacement, proportional to w.
    u = torch.rand(T, E, generator=g, device=device).clamp_(1e-20, 1.0 - 1e-7)
    scores = log_w[None, :] - torch.log(-torch.log(u))
    topk_ids = torch.topk(scores, k, dim=1).indices.to(torch.int32).contiguous()
    return topk_ids, E, block


def _align(topk_ids, num_experts, block_size):
    """Counting layout in plain torch: counts, padded offsets, stable argsort, scatter.

    Written without data-dependent sizes or host syncs (bincount on CUDA reads its max back to
    the host, which a CUDA graph capture refuses), so the same code captures and compiles.
    """
    flat = topk_ids.reshape(-1).long()
    num_pairs = flat.numel()
    sorted_len = num_pairs + num_experts * (block_size - 1)
    num_blocks = (sorted_len + block_size - 1) // block_size

    counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_size - 1) // block_size * block_size
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    count_start = torch.cumsum(counts, 0) - counts

    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(num_pairs, device=flat.device) - count_start[expert_of]
    slot = padded_start[expert_of] + rank
    sorted_ids = torch.full((sorted_len,), num_pairs, dtype=torch.int32, device=flat.device)
    sorted_ids[slot] = order.to(torch.int32)

    block_begin = torch.arange(num_blocks, device=flat.device) * block_size
    block_expert = torch.searchsorted(padded_end, block_begin, right=True)
    expert_ids = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    num_tokens_post_pad = padded_end[-1:].to(torch.int32)
    return sorted_ids, expert_ids, num_tokens_post_pad


def reference(topk_ids, num_experts, block_size):
    return _align(topk_ids, num_experts, block_size)


def oracle(topk_ids, num_experts, block_size):
    # Integers only: the reference is exact (its order inside a group is the stable one).
    return _align(topk_ids, num_experts, block_size)


def check(outputs, expected, inputs):
    """Compare what is defined; None when correct, else a sentence about the first difference."""
    topk_ids, num_experts, block_size = inputs
    names = ("sorted_token_ids", "expert_ids", "num_tokens_post_pad")
    if not isinstance(outputs, (tuple, list)) or len(outputs) != 3:
        return f"expected a tuple of 3 tensors {names}, got {type(outputs).__name__}"
    for name, out, ref in zip(names, outputs, expected, strict=True):
        if not isinstance(out, torch.Tensor):
            return f"{name}: expected a tensor, got {type(out).__name__}"
        if out.dtype != ref.dtype or tuple(out.shape) != tuple(ref.shape):
            return (f"{name}: expected {ref.dtype} {tuple(ref.shape)}, "
                    f"got {out.dtype} {tuple(out.shape)}")
    sorted_ids, expert_ids, total = (o.detach().cpu().long() for o in outputs)
    ref_sorted, ref_experts, ref_total = (e.detach().cpu().long() for e in expected)
    num_pairs = topk_ids.numel()

    if total.item() != ref_total.item():
        return f"num_tokens_post_pad: expected {ref_total.item()}, got {total.item()}"
    bad = (expert_ids != ref_experts).nonzero()
    if bad.numel():
        b = bad[0].item()
        return (f"expert_ids[{b}] (block of slots {b * block_size}..{(b + 1) * block_size - 1}):"
                f" expected {ref_experts[b].item()}, got {expert_ids[b].item()}"
                f" ({bad.numel()} blocks differ)")

    sentinel = ref_sorted == num_pairs
    bad = (sentinel != (sorted_ids == num_pairs)).nonzero()
    if bad.numel():
        s = bad[0].item()
        want = "the sentinel" if sentinel[s] else "a pair index"
        return (f"sorted_token_ids[{s}]: expected {want} (sentinel = T*k = {num_pairs}), got "
                f"{sorted_ids[s].item()} ({bad.numel()} slots differ in sentinel placement)")
    bad = ((sorted_ids < 0) | (sorted_ids > num_pairs)).nonzero()
    if bad.numel():
        s = bad[0].item()
        return f"sorted_token_ids[{s}] = {sorted_ids[s].item()} is outside [0, {num_pairs}]"

    # Inside the padded total every slot belongs to the expert of its block; compare the
    # groups as multisets by sorting (expert, pair index) keys.
    used = ref_total.item()
    slot_expert = ref_experts[: used // block_size].repeat_interleave(block_size)
    real = ~sentinel[:used]
    key_ref = slot_expert[real] * (num_pairs + 1) + ref_sorted[:used][real]
    key_out = slot_expert[real] * (num_pairs + 1) + sorted_ids[:used][real]
    key_ref, _ = torch.sort(key_ref)
    key_out, _ = torch.sort(key_out)
    if torch.equal(key_ref, key_out):
        return None
    # Name the first expert whose group differs, and how.
    flat = topk_ids.reshape(-1).cpu().long()
    for e in range(num_experts):
        in_group = real & (slot_expert == e)
        want = ref_sorted[:used][in_group].tolist()
        got = sorted_ids[:used][in_group].tolist()
        if sorted(want) == sorted(got):
            continue
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        dup = len(got) - len(set(got))
        detail = []
        if missing:
            detail.append(f"missing pair indices {missing[:8]}")
        if extra:
            detail.append(f"holds pair indices {extra[:8]} of other experts "
                          f"(pair {extra[0]} has expert {flat[extra[0]].item()})")
        if dup:
            detail.append(f"{dup} duplicated pair indices")
        return f"sorted_token_ids: the group of expert {e}: " + "; ".join(detail)
    return "sorted_token_ids: the groups differ"


_compiled = None


def comparator_prepare(topk_ids, num_experts, block_size):
    """Compile the same counting layout with torch.compile (lazily, untimed) and warm it up."""
    global _compiled
    if _compiled is None:
        # One static-shape graph per workload: the workloads of a run outnumber dynamo's default
        # recompile limit (8), past which it would silently fall back to eager.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        _compiled = torch.compile(_align, dynamic=False)
    _compiled(topk_ids, num_experts, block_size)
    return topk_ids, num_experts, block_size


def comparator(topk_ids, num_experts, block_size):
    return _compiled(topk_ids, num_experts, block_size)
