"""The static hot-loop report: the ISA parser (xe2rt/build/hotloop.py) on a hand-written dump, the AOT rules on
private sends, the report recorded in the manifest for every bmg/lnl kernel (the issue's bar: no private send, 2D block
loads and >= 2 DPAS per send in the GEMM m16/m32 tiles), and the estimate's formula on hand-computed numbers."""
import pytest

import xe2rt
from xe2rt import artifacts, targets
from xe2rt.bench import xe2_static
from xe2rt.build import aot, hotloop

ASM = """//.kernel toy
(W)     mov (1|M0)               r2.0<1>:d     0:w
_0_10:
(W)     load.ugm.d32x64t.a64 (1|M0)  r10:4       [r4:1]             {$1} // ex_desc:0x0; desc:0x0 // $1
        add (16|M0)              r5.0<1>:d     r5.0<1;1,0>:d     1:w
_0_11:
        load.ugm.d16u32.a64 (16|M0)  r20:1       [r6:2]             {$2} // $2
        cmp (16|M0)   (lt)f0.0   null<1>:d     r5.0<1;1,0>:d     r7.0<1;1,0>:d
(f0.0)  goto.b (16|M0)                       _0_12             _0_11            // inner loop
_0_12:
(W)     jmpi                                 _0_10
_0_20:
        load_block2d.ugm.d16v.a64 (1|M0)  r30:31  [r1:1]             {$3} // $3
        load_block2d.ugm.d16.a64 (1|M0)  r70:8  [r2:1]             {$4} // $4
        load_block2d.ugm.d16.a64.ca.ca (1|M0)  null:0 [r3:1]      {$5} // $5
        dpas.8x8 (16|M0)         r80:f         r80:f             r70:hf            r30.0:hf         {$6} // $6
        dpas.8x8 (16|M0)         r88:f         r88:f             r70:hf            r38.0:hf         {$7} // $7
        store.ugm.d32x8.a32.wb.wb (16|M0)  ss[a0.0][r9:1] r80:8  {$8} // ex_desc:a0.0; //  address space: private; ; $8
        store_block2d.ugm.d16.a64 (1|M0)  [r2:1]  r96:4          {$9} // $9
(f1.0)  goto.b (16|M0)                       _0_21             _0_20
_0_21:
(W)     send.gtwy (1|M0)         null     r255  null:0  0x0            0x02000010           {EOT} // end of thread
"""


def test_parser_on_a_hand_written_dump(tmp_path):
    lines = ASM.splitlines()
    spans = hotloop.loops(lines)
    assert len(spans) == 3  # outer _0_10, inner _0_11, the DPAS loop _0_20
    hot = hotloop.hot_loop(lines)
    assert (hot["dpas"], hot["sends"], hot["prefetches"], hot["block2d_loads"]) == (2, 5, 1, 2)
    assert hot["global_load_bytes"] == 32 * 64 + 8 * 64  # a 31-GRF response is a full 2 KB block
    assert hot["private_sends"] == 1 and hot["store_bytes"] == 16 * 4 * 8 + 4 * 64
    # Without DPAS the innermost loop moving the most bytes wins: the inner loop (32 B), not the outer one.
    no_dpas = [l for l in lines if "_0_20" not in l and "dpas" not in l]
    inner = hotloop.hot_loop(no_dpas[:no_dpas.index("_0_21:")])
    assert inner["global_load_bytes"] == 16 * 2 and inner["instructions"] == 3
    path = tmp_path / "x_simd16_entry_0001.asm"
    path.write_text(ASM)
    name, report = hotloop.report_file(path)
    assert name == "toy" and report["kernel_private_sends"] == 1


def test_aot_rules_fail_on_private_sends():
    kernel = {"simd_size": 16, "spill_size": 0, "grf_count": 256, "private_size": 512, "private_sends": 3,
              "has_dpas": True, "dpas_instructions": 4}
    problems = aot.rule_violations("bmg/x.spv", {"k": kernel}, expect_dpas=True)
    assert len(problems) == 1 and "3 sends to private memory" in problems[0]
    assert aot.rule_violations("bmg/x.spv", {"k": dict(kernel, private_sends=0)}, expect_dpas=True) == []


def test_aot_simd_rule_for_shipped_and_user_kernels():
    kernel = {"simd_size": 32, "spill_size": 0, "grf_count": 128, "private_size": 0, "private_sends": 0,
              "has_dpas": False, "dpas_instructions": 0, "reqd_sub_group_size": None}
    # the shipped kernels' rule: SIMD16
    assert aot.rule_violations("bmg/x.spv", {"k": kernel}, False) == ["bmg/x.spv:k: SIMD32, expected SIMD16"]
    # a user's kernel: IGC's choice is no fault unless the kernel declares its sub-group size
    assert aot.rule_violations("bmg/x.spv", {"k": kernel}, False, simd=None) == []
    declared = dict(kernel, reqd_sub_group_size=16)
    assert aot.rule_violations("bmg/x.spv", {"k": declared}, False, simd=None) == [
        "bmg/x.spv:k: SIMD32, expected SIMD16"]
    assert aot.rule_violations("bmg/x.spv", {"k": dict(declared, simd_size=16)}, False, simd=None) == []


def xe2_reports():
    manifest = artifacts.manifest()
    for key, entry in sorted(manifest["artifacts"].items()):
        if entry["target"] in ("bmg", "lnl"):
            yield key, entry


def test_every_gpu_kernel_has_a_report_and_no_private_send():
    seen = 0
    for key, entry in xe2_reports():
        assert entry.get("aot"), f"{key}: no AOT report; run python build_scripts/aot.py"
        for name, k in entry["aot"]["kernels"].items():
            assert "hot_loop" in k and "private_sends" in k, f"{key}:{name}"
            assert k["private_sends"] == 0 and k["spill_size"] == 0, f"{key}:{name}"
            seen += 1
    assert seen > 100


@pytest.mark.parametrize("target", ["bmg", "lnl"])
def test_gemm_hot_loops_meet_the_bar(target):
    kernels = artifacts.manifest()["artifacts"][f"{target}/gemm_fp16.spv"]["aot"]["kernels"]
    for layout in ("kn", "nk"):
        for rows in (16, 32):
            hot = kernels[f"gemm_fp16_{layout}_m{rows}_2d"]["hot_loop"]
            assert hot["block2d_loads"] > 0 and hot["private_sends"] == 0
            assert hot["dpas"] / hot["sends"] >= 2, (layout, rows, hot)  # prefetches count as sends
            assert hot["dpas"] == 2 * rows // 8 * 4  # K step 32: two DPAS K blocks per 8-row x 16-column block


def test_estimate_formulas_by_hand():
    chip = targets.CHIPS["BMG-G21"]
    gemv = xe2_static.estimate({"instructions": 64, "dpas": 0, "sends": 4, "global_load_bytes": 1024}, chip, {}, "g")
    assert gemv["bytes_per_instruction"] == 16
    assert gemv["bounds"]["issue"] == pytest.approx(16 * 160 * 2.67)  # B/instr x XVEs x GHz
    assert gemv["ceiling"] == 456.0 and gemv["bound_by"] == "memory"
    constants = {"SG_N": 64, "SGS_M": 8, "SGS_N": 4}
    gemm = xe2_static.estimate({"instructions": 61, "dpas": 32, "sends": 5, "global_load_bytes": 6144}, chip,
                               constants, "gemm_fp16_kn_m32_2d")
    assert gemm["dpas_per_send"] == 32 / 5
    assert gemm["bounds"]["DPAS"] == pytest.approx(2048 * 20 * 2.67 / 1e3)  # 16 x 32 > 61: XMX-bound loop
    # work-group tile 256 x 256, 2 * 32 * 512 bytes per 32 k: 128 flop per byte
    assert gemm["bounds"]["load"] == pytest.approx(456.0 * 128 / 1e3)
    assert gemm["bound_by"] == "load"


def test_info_and_static_table_cover_every_gpu_kernel():
    data = xe2rt.info()
    names = {(r["binary"], r["kernel"]) for r in data["hot_loops"]}
    expected = {(key, k) for key, entry in xe2_reports() for k in entry["aot"]["kernels"]}
    assert names == expected
    table = xe2_static.format_table(data["hot_loops"])
    assert "gemm_fp16_nk_m32_2d" in table and "gemv_w4a16_g128_sym" in table and "ESTIMATES" in table
