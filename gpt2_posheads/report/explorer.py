"""An offline attention explorer: one self-contained HTML file per model (JavaScript and data inlined, no network).

Choose a prompt, a layer and a head: the token-labelled attention pattern (hover: query token, key token,
weight), the raw pre-mask scores beside it (the upper triangle the causal mask removes included), and the
diagonal profile (mean attention per offset, key 0 left out: the toolkit's one definition). A toggle shows the
same head under each intervention of :mod:`gpt2_posheads.analysis.interventions`:

* ``W_pos averaged /10``: ``W_pos`` averaged in groups of 10 (models with learned absolute positions);
* ``p-1 masked below``: attention to the previous position masked at every 5th query in every layer below the
  head's own (nothing to mask for layer 0);
* ``ext. pos. averaged /10``: the extended positional embeddings averaged in groups of 10 just before the head's
  layer;
* ``aggregator edited``: the aggregator's pattern edited as in the post, output x2. On the repeat-string prompt
  this is the post's edit; on other prompts every query of the aggregator attends two tokens back instead of one.

Patterns are stored as bytes (weight x 255) and raw scores as bytes between each head's minimum and maximum,
base64-encoded, so a 4-layer, 4-head model with three 64-token prompts is about 2 MB. The page reads
``#prompt=P&layer=L&head=H&variant=V`` from its address, and writes what it draws into ``#summary`` (a
sentence and ``data-`` attributes), which a test in headless Chromium reads back.
"""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..analysis.diagonals import choose_aggregator, diagonal_attention, rank_from_diagonals
from ..analysis.interventions import (average_ext_pos_embed, average_pos_embed, edit_head_pattern, hooks_for,
                                      mask_previous_attention, scale_head_output)
from ..analysis.repeat_prompt import edit_mapping, repeat_string_prompt, single_token_target
from ..analysis.posembed import extended_pos_embeddings_by_layer
from ..analysis.scores import raw_scores_from_qk
from ..model.attention import QKCapture, attn_scale
from ..model.identity import has_learned_positions
from ..model.tokens import model_device
from ..model.validation import head_name

VARIANTS = {"clean": "clean", "wpos": "W_pos averaged /10", "mask": "p-1 masked below (every 5th query)",
            "extavg": "ext. pos. averaged /10 at the head's layer", "edit": "aggregator edited (post), output x2"}


def _capture(model, tokens: torch.Tensor, hooks=()) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's pattern and raw (pre-mask) scores on one prompt ``[pos]``: two ``[layer, head, q, k]`` tensors."""
    L = model.cfg.n_layers
    box: dict[str, torch.Tensor] = {}

    def grab(name):
        def hook(x, hook):
            box[name] = x.detach()
        return hook

    caps = [QKCapture(model, l) for l in range(L)]
    extra = [h for c in caps for h in c.hooks()] + [(f"blocks.{l}.attn.hook_pattern", grab(l)) for l in range(L)]
    with torch.inference_mode():
        model.run_with_hooks(tokens[None].to(model_device(model)), fwd_hooks=list(hooks) + extra, return_type=None)
    pat = torch.stack([box[l][0].float().cpu() for l in range(L)])
    raw = torch.stack([raw_scores_from_qk(c.q, c.k, attn_scale(model.cfg, l))[0].cpu() for l, c in enumerate(caps)])
    return pat, raw


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.uint8).tobytes()).decode("ascii")


def _pack(pat: torch.Tensor, raw: torch.Tensor) -> dict:
    """Bytes: patterns x 255; raw scores scaled between each head's finite minimum and maximum."""
    r = raw.double()
    lo = torch.nan_to_num(r, nan=0.0).flatten(2).min(-1).values
    hi = torch.nan_to_num(r, nan=0.0).flatten(2).max(-1).values
    span = (hi - lo).clamp_min(1e-12)
    q = ((r - lo[..., None, None]) / span[..., None, None] * 255).round().clamp(0, 255)
    return {"pat": _b64((pat.clamp(0, 1) * 255).round().numpy()), "raw": _b64(q.numpy()),
            "rawmin": lo.flatten().tolist(), "rawmax": hi.flatten().tolist()}


def _edit_hooks(model, agg: tuple[int, int], n: int, mapping: dict[int, int] | None):
    l, h = agg
    if mapping is None:  # a general prompt: every query attends two back instead of one (output x2)
        mapping = {q: q - 2 for q in range(2, n)}
    return hooks_for(model, edit_head_pattern(l, h, mapping), scale_head_output(l, h, 2.0))


def explorer_data(model, prompts: Sequence[tuple[str, torch.Tensor, dict | None]], label: str,
                  aggregator: tuple[int, int] | None = None, ext_prompts: int = 8) -> dict:
    """Everything the page draws. ``prompts``: ``(name, tokens [pos], edit mapping or None)``; ``aggregator``
    defaults to :func:`~gpt2_posheads.analysis.diagonals.choose_aggregator` on the prompts."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if aggregator is None:
        n_min = min(len(t) for _, t, _ in prompts)
        aggregator = choose_aggregator(rank_from_diagonals(diagonal_attention(
            model, torch.stack([t[:n_min] for _, t, _ in prompts]), progress=False)))
    learned = has_learned_positions(model)
    ext = extended_pos_embeddings_by_layer(model, range(L), n_prompts=ext_prompts)  # once, for every prompt
    out = {"model": label, "n_layers": L, "n_heads": H, "aggregator": head_name(*aggregator),
           "variants": {k: v for k, v in VARIANTS.items() if learned or k != "wpos"}, "prompts": []}
    for name, tokens, mapping in prompts:
        n = len(tokens)
        variants = {"clean": _capture(model, tokens)}
        if learned:
            variants["wpos"] = _capture(model, tokens, average_pos_embed(10).hooks(model))
        # masking below / averaging at the head's own layer differ per layer: one run per layer, keep that layer
        mask_p, mask_r, ext_p, ext_r = [], [], [], []
        for layer in range(L):
            hooks = mask_previous_attention(5, range(layer)).hooks(model) if layer > 0 else []
            p, r = _capture(model, tokens, hooks) if hooks else variants["clean"]
            mask_p.append(p[layer])
            mask_r.append(r[layer])
            p, r = _capture(model, tokens, average_ext_pos_embed(layer, 10, ext=ext[layer]).hooks(model))
            ext_p.append(p[layer])
            ext_r.append(r[layer])
        variants["mask"] = (torch.stack(mask_p), torch.stack(mask_r))
        variants["extavg"] = (torch.stack(ext_p), torch.stack(ext_r))
        variants["edit"] = _capture(model, tokens, _edit_hooks(model, aggregator, n, mapping))
        tok_strs = [model.tokenizer.decode([int(t)]) for t in tokens]
        out["prompts"].append({"name": name, "n": n, "tokens": tok_strs,
                               "variants": {k: _pack(*v) for k, v in variants.items()}})
    return out


def default_prompts(model, n_tokens: int = 64, seed: int = 0) -> list[tuple[str, torch.Tensor, dict | None]]:
    """Three prompts: held-out natural text, the post's repeat-string prompt (the edit is the post's there) and a
    random sequence repeated twice (induction)."""
    from ..analysis.induction import repeated_random_tokens
    from ..analysis.prompts import documents, make_prompts

    n_tokens = min(n_tokens, model.cfg.n_ctx)
    docs, _ = documents("wikitext")
    text = make_prompts(model.tokenizer, 1, n_tokens, seed=seed, docs=docs)[0]
    target = single_token_target(model.tokenizer, " ninja turtle pirate")
    rp = repeat_string_prompt(model.tokenizer, target, n_given=1, n_demos=1, seed=seed, max_len=model.cfg.n_ctx)
    seg = (n_tokens - 1) // 2
    rand = repeated_random_tokens(model, 1, seg, seed=seed)[0]
    return [("natural text (WikiText-2)", text, None), ("repeat-string prompt (the post's, one demonstration)", rp.tokens, edit_mapping(rp)),
            (f"random tokens repeated ({seg} + {seg})", rand, None)]


def write_explorer(model, path: str | Path, label: str, prompts=None, aggregator: tuple[int, int] | None = None) -> Path:
    """Write the explorer of ``model`` to ``path`` (see the module doc); returns the path."""
    data = explorer_data(model, prompts if prompts is not None else default_prompts(model), label, aggregator)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(PAGE.replace("__TITLE__", html.escape(f"{label}: attention explorer"))
                   .replace("__DATA__", json.dumps(data).replace("</", "<\\/")), encoding="utf-8")
    tmp.replace(path)
    return path


PAGE = r"""<!doctype html><html><head><meta charset="utf-8"><title>__TITLE__</title><style>
body{font-family:system-ui,sans-serif;margin:1em 1.5em;color:#1f2328}select,label{font-size:14px;margin-right:10px}
#panels{display:flex;gap:24px;flex-wrap:wrap;margin-top:10px}.panel h3{font-size:14px;margin:4px 0}
#tip{position:fixed;pointer-events:none;background:#fff;border:1px solid #888;padding:3px 6px;font-size:12px;display:none}
#summary{margin-top:8px;font-size:14px}.note{color:#57606a;font-size:12px;max-width:900px}</style></head><body>
<h2>__TITLE__</h2>
<div><label>prompt <select id="prompt"></select></label><label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label><label>intervention <select id="variant"></select></label></div>
<div id="summary"></div>
<div id="panels"><div class="panel"><h3>attention pattern (rows: query, columns: key)</h3><canvas id="pat"></canvas></div>
<div class="panel"><h3>raw scores before the causal mask</h3><canvas id="raw"></canvas></div>
<div class="panel"><h3>diagonal profile: mean attention per offset (key 0 left out)</h3><canvas id="prof" width="380" height="260"></canvas></div></div>
<p class="note">Offline: the data and this script are inside the file. Interventions: W_pos averaged in groups of 10; attention to
the previous position masked at every 5th query in every layer below the head's; the extended positional embeddings
averaged in groups of 10 just before the head's layer; the aggregator's pattern edited as in the post with its output
doubled (on other prompts than the repeat-string one, it attends two tokens back instead of one).</p>
<div id="tip"></div>
<script>
const D = __DATA__;
const $ = id => document.getElementById(id);
function bytes(b64){const s=atob(b64);const a=new Uint8Array(s.length);for(let i=0;i<s.length;i++)a[i]=s.charCodeAt(i);return a;}
const cache = {};
function arrays(p, v){const k=p+"|"+v; if(!cache[k]){const x=D.prompts[p].variants[v]; cache[k]={pat:bytes(x.pat),raw:bytes(x.raw),x:x};} return cache[k];}
function opt(sel, items){sel.innerHTML=""; items.forEach(([v,t])=>{const o=document.createElement("option");o.value=v;o.textContent=t;sel.appendChild(o);});}
function params(){const h=new URLSearchParams(location.hash.slice(1));return h;}
function init(){
  opt($("prompt"), D.prompts.map((p,i)=>[i,p.name]));
  opt($("layer"), [...Array(D.n_layers).keys()].map(l=>[l,"L"+l]));
  opt($("head"), [...Array(D.n_heads).keys()].map(h=>[h,"H"+h]));
  opt($("variant"), Object.entries(D.variants));
  const q=params(); for(const k of ["prompt","layer","head","variant"]) if(q.has(k)) $(k).value=q.get(k);
  for(const k of ["prompt","layer","head","variant"]) $(k).onchange=draw;
  draw();
}
function colour(t){const r=Math.round(255*(1-t)), g=Math.round(255*(1-0.55*t)), b=Math.round(255*(1-0.15*t)); return `rgb(${r},${g},${b})`;}
function heat(canvas, n, val, tokens, label){
  const cell=Math.max(3,Math.floor(420/n)), pad=54; canvas.width=pad+n*cell+4; canvas.height=pad+n*cell+4;
  const c=canvas.getContext("2d"); c.fillStyle="#fff"; c.fillRect(0,0,canvas.width,canvas.height);
  for(let q=0;q<n;q++)for(let k=0;k<n;k++){const v=val(q,k); if(v===null) continue; c.fillStyle=colour(v); c.fillRect(pad+k*cell,pad+q*cell,cell,cell);}
  c.strokeStyle="rgba(220,0,0,0.6)"; c.setLineDash([2,2]); c.beginPath(); c.moveTo(pad,pad+cell); c.lineTo(pad+(n-1)*cell,pad+n*cell); c.stroke(); c.setLineDash([]);
  if(n<=72){c.fillStyle="#333"; c.font=Math.min(10,cell)+"px monospace";
    for(let i=0;i<n;i++){const t=tokens[i].replace(/\n/g,"\\n").slice(0,6); c.textAlign="right"; c.fillText(t,pad-2,pad+i*cell+cell*0.8);
      c.save(); c.translate(pad+i*cell+cell*0.8,pad-2); c.rotate(-Math.PI/2); c.textAlign="left"; c.fillText(t,0,0); c.restore();}}
  canvas.onmousemove=e=>{const r=canvas.getBoundingClientRect(); const k=Math.floor((e.clientX-r.left-pad)/cell), q=Math.floor((e.clientY-r.top-pad)/cell);
    const tip=$("tip"); if(q<0||k<0||q>=n||k>=n){tip.style.display="none";return;}
    tip.style.display="block"; tip.style.left=(e.clientX+12)+"px"; tip.style.top=(e.clientY+12)+"px";
    tip.textContent=`query ${q} ${JSON.stringify(tokens[q])} → key ${k} ${JSON.stringify(tokens[k])}: ${label(q,k)}`;};
  canvas.onmouseleave=()=>{$("tip").style.display="none";};
}
function draw(){
  const p=+$("prompt").value, l=+$("layer").value, h=+$("head").value, v=$("variant").value;
  const P=D.prompts[p], n=P.n, A=arrays(p,v), i=l*D.n_heads+h, off=i*n*n;
  const w=(q,k)=>A.pat[off+q*n+k]/255;
  const lo=A.x.rawmin[i], hi=A.x.rawmax[i], raw=(q,k)=>lo+(hi-lo)*A.raw[off+q*n+k]/255;
  heat($("pat"), n, (q,k)=>k<=q?w(q,k):null, P.tokens, (q,k)=>k<=q?w(q,k).toFixed(3):"(masked: future)");
  heat($("raw"), n, (q,k)=>(A.raw[off+q*n+k])/255, P.tokens, (q,k)=>raw(q,k).toFixed(3)+(k>q?" (removed by the causal mask)":""));
  // every offset counts (the toolkit's one rule); the first 16 are drawn
  const prof=[]; for(let d=0;d<n-1;d++){let s=0,c=0; for(let q=d+1;q<n;q++){s+=w(q,q-d);c++;} prof.push(c?s/c:0);}
  const nOff=Math.min(prof.length,16);
  const cv=$("prof"), c=cv.getContext("2d"); c.fillStyle="#fff"; c.fillRect(0,0,cv.width,cv.height);
  const mx=Math.max(...prof.slice(0,nOff),1e-9), bw=(cv.width-40)/nOff;
  c.fillStyle="#333"; c.font="10px sans-serif"; c.fillText("max "+mx.toFixed(3),2,12); c.fillText("offset q - k",cv.width-70,cv.height-6+0);
  prof.slice(0,nOff).forEach((y,d)=>{c.fillStyle=d==1?"#cf222e":"#4c78a8"; const hgt=(cv.height-40)*y/mx; c.fillRect(30+d*bw,cv.height-20-hgt,bw-3,hgt);
    c.fillStyle="#333"; c.fillText(d,30+d*bw+bw/3,cv.height-6);});
  const sorted=prof.map((y,d)=>[y,d]).sort((a,b)=>b[0]-a[0]); const top=sorted[0][1], ratio=sorted[1][0]/Math.max(sorted[0][0],1e-12);
  const name="L"+l+"H"+h, s=$("summary");
  s.textContent=`${name} on "${P.name}" (${D.variants[v]}): greatest diagonal at offset ${top}, mean attention to the previous token ${prof[1].toFixed(3)}, second / greatest diagonal ${ratio.toFixed(3)}${name==D.aggregator?" — the model's aggregator":""}`;
  Object.assign(s.dataset,{head:name,variant:v,prompt:p,topOffset:top,prevMass:prof[1].toFixed(4),ratio:ratio.toFixed(4)});
  location.hash=`prompt=${p}&layer=${l}&head=${h}&variant=${v}`;
}
init();
</script></body></html>"""
