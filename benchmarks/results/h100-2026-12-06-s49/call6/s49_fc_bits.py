"""s49: GEMM2 with the fused top-k combine at prefill, n-major tile order -- same bits as the default?"""
import torch
from fusedmoe.backends import triton_moe
from fusedmoe.backends.kernel_configs import choose_moe_config
from fusedmoe.backends.triton import run_weights
from fusedmoe.bench.presets import BenchCase, get_preset, make_inputs, make_weights
from fusedmoe.config import Format

dev = torch.device("cuda")
for pname, wfs, T in (("deepseek-v3-tp8", ("fp8_channel", "bf16"), 8192), ("deepseek-v3-tp8", ("fp8_tensor",), 2048)):
    p = get_preset(pname)
    for wf_name in wfs:
        wf = Format(wf_name)
        w = make_weights(p, wf, device=dev)
        case = BenchCase(p, wf, wf.natural_activation_format(), p.routing_config())
        s = make_inputs(case, T, device=dev, nsets=1)[0]
        base = choose_moe_config(T, p.hidden, w.padded_intermediate_size, w.num_experts, p.top_k, wf, p.activation,
                                 torch.cuda.get_device_name())
        var = {"gemm1": base.gemm1.to_dict(),
               "gemm2": {**base.gemm2.to_dict(), "n_tiles": 1, "persistent": 0, "group_m": 4096}}
        ref = run_weights(s.x, w, s.topk, activation_format=case.act_format).clone()
        triton_moe.set_fused_combine(1 << 30)
        outs = [run_weights(s.x, w, s.topk, activation_format=case.act_format, config=var).clone() for _ in range(2)]
        triton_moe.set_fused_combine(0)
        plain = run_weights(s.x, w, s.topk, activation_format=case.act_format, config=var).clone()
        torch.cuda.synchronize()
        print(pname, wf_name, T, "fused==default", torch.equal(outs[0], ref), "fused twice", torch.equal(outs[0], outs[1]),
              "unfused==default", torch.equal(plain, ref), "maxdiff", (outs[0].float() - ref.float()).abs().max().item(),
              flush=True)
        del w
        torch.cuda.empty_cache()
