#!/usr/bin/env python3
"""Writes tests/fixtures/delta_net_ops/cases.safetensors: Gated DeltaNet's pieces as transformers
5.24 computes them (transformers.models.qwen3_next.modeling_qwen3_next), on random inputs, for
tests/delta_net_test.cpp (`DeltaNetOps.*`): linnet's causal_conv1d, gated_delta_rule and
rms_norm_gated ops against

- causal_conv1d_fn (SiLU) on x [1, C, T];
- the decay and beta gates as Qwen3NextGatedDeltaNet.forward makes them from a, b, A_log and
  dt_bias, then torch_chunk_gated_delta_rule (chunks of 64: what transformers runs for a
  prompt) and torch_recurrent_gated_delta_rule (what it runs for each decoded token), both with
  use_qk_l2norm_in_kernel, their outputs and final states — with key heads fewer than value
  heads, T = 150 (three chunks, the last partial), then 7 more tokens continued from the state;
- Qwen3NextRMSNormGated on x, z [N, dv].

Everything f32. Runs in tools/golden's venv (torch, transformers), as make_golden.py:
    tools/golden/.venv/bin/python tools/golden/make_delta_net_ops.py
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "delta_net_ops")


def main():
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file
    from transformers.models.qwen3_next import modeling_qwen3_next as m

    torch.manual_seed(0)
    torch.set_num_threads(1)
    T, T2, hk, dk, hv, dv, K = 150, 7, 2, 16, 4, 8, 4
    C = 2 * hk * dk + hv * dv
    out = {}
    # The convolution: x [T, C] as linnet holds a step's tokens; transformers' [1, C, T].
    x = torch.randn(T, C)
    w = torch.randn(C, K) * 0.5
    out["conv.x"], out["conv.weight"] = x, w
    out["conv.out"] = m.causal_conv1d_fn(x.T.unsqueeze(0).contiguous(), w, None, activation="silu")[0].T.contiguous()

    # The delta rule on the convolution's kind of output, and the gates from raw a and b.
    qkv = torch.randn(T + T2, C)
    ab = torch.randn(T + T2, 2 * hv) * 2.0
    a_log = torch.log(torch.empty(hv).uniform_(0.5, 8.0))
    dt_bias = torch.randn(hv) * 0.5
    out["rule.qkv"], out["rule.ab"], out["rule.a_log"], out["rule.dt_bias"] = qkv, ab, a_log, dt_bias
    q = qkv[:, : hk * dk].reshape(1, -1, hk, dk)
    k = qkv[:, hk * dk: 2 * hk * dk].reshape(1, -1, hk, dk)
    v = qkv[:, 2 * hk * dk:].reshape(1, -1, hv, dv)
    b, a = ab[:, :hv].reshape(1, -1, hv), ab[:, hv:].reshape(1, -1, hv)
    beta = b.sigmoid()
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)
    first = slice(0, T)
    o_chunk, s_chunk = m.torch_chunk_gated_delta_rule(q[:, first], k[:, first], v[:, first], g=g[:, first],
                                                      beta=beta[:, first], output_final_state=True,
                                                      use_qk_l2norm_in_kernel=True)
    o_rec, s_rec = m.torch_recurrent_gated_delta_rule(q[:, first], k[:, first], v[:, first], g=g[:, first],
                                                      beta=beta[:, first], output_final_state=True,
                                                      use_qk_l2norm_in_kernel=True)
    rest = slice(T, T + T2)
    o_more, s_more = m.torch_recurrent_gated_delta_rule(q[:, rest], k[:, rest], v[:, rest], g=g[:, rest],
                                                        beta=beta[:, rest], initial_state=s_chunk,
                                                        output_final_state=True, use_qk_l2norm_in_kernel=True)
    out["rule.out_chunked"] = o_chunk[0].reshape(T, hv * dv)
    out["rule.state_chunked"] = s_chunk[0]
    out["rule.out_recurrent"] = o_rec[0].reshape(T, hv * dv)
    out["rule.state_recurrent"] = s_rec[0]
    out["rule.out_continued"] = o_more[0].reshape(T2, hv * dv)
    out["rule.state_continued"] = s_more[0]
    out["rule.dims"] = torch.tensor([hk, dk, hv, dv], dtype=torch.int32)

    # The gated norm.
    norm = m.Qwen3NextRMSNormGated(dv, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(dv) * 0.3 + 1.0)
    nx, nz = torch.randn(40, dv) * 3.0, torch.randn(40, dv) * 2.0
    out["norm.x"], out["norm.z"], out["norm.weight"] = nx, nz, norm.weight.detach().clone()
    with torch.no_grad():
        out["norm.out"] = norm(nx, nz)

    os.makedirs(OUT, exist_ok=True)
    save_file({k2: t.contiguous().float() if t.dtype != torch.int32 else t for k2, t in out.items()},
              os.path.join(OUT, "cases.safetensors"))
    diff = (o_chunk - o_rec).abs().max().item() / o_rec.abs().max().item()
    print(f"wrote {len(out)} tensors; transformers' chunked and recurrent rules differ by {diff:.2e} (relative)")


if __name__ == "__main__":
    main()
