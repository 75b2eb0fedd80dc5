"""The toy figures' pieces: log axes labelled with the numbers they mark, seed bands, the animation's first view."""

import numpy as np
import plotly.graph_objects as go

from gpt2_posheads.posts.prev_token_toy import embedding_animation
from gpt2_posheads.toy.figures import band, log_axis, log_ticks, points_with_sd


def test_log_ticks_read_as_numbers():
    t = log_ticks([1, 32])
    assert t["ticktext"] == ["1", "2", "3", "5", "10", "20", "30"]  # not "2", "3" for 20, 30
    assert t["tickvals"][-2:] == [20.0, 30.0]
    assert log_ticks([2.5e-6, 0.03])["ticktext"] == ["1e-5", "1e-4", "0.001", "0.01"]  # one a decade
    narrow = log_ticks([3.9e-5, 6.1e-5])  # less than a decade: still at least 3 labels
    assert len(narrow["tickvals"]) >= 3 and "5e-5" in narrow["ticktext"]
    lo, hi = narrow["range"]
    assert lo < np.log10(3.9e-5) and hi > np.log10(6.1e-5)


def test_log_axis_on_a_subplot():
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2)
    log_axis(fig, "y", [1, 30], row=1, col=2)
    assert fig.layout.yaxis2.type == "log" and "30" in fig.layout.yaxis2.ticktext and fig.layout.yaxis.type is None


def test_band_spans_the_seeds_and_points_carry_the_sd():
    fig = go.Figure()
    band(fig, [0, 1, 2], [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [2.0, 2.0, 2.0]], "x", "#000000")
    area, line = fig.data
    assert list(area.y) == [3.0, 2.0, 3.0, 1.0, 2.0, 1.0]  # highest seed forwards, lowest backwards
    assert list(line.y) == [2.0, 2.0, 2.0] and "3 seeds" in line.name
    p = points_with_sd([1, 2], [[1.0, 4.0], [3.0, 4.0]], "p")
    assert list(p.y) == [2.0, 4.0] and np.allclose(p.error_y.array, [np.sqrt(2), 0.0])
    one = go.Figure()
    band(one, [0, 1], [[1.0, 2.0]], "one seed", "#000000")
    assert len(one.data) == 1 and one.data[0].name == "one seed"


def test_animation_opens_on_its_last_frame_with_the_slider_there():
    steps = [1, 100, 200]
    snaps = [{"W_E": np.random.default_rng(i).normal(size=(5, 2)).tolist()} for i in range(3)]
    fig = embedding_animation({"snapshots": snaps, "snapshot_steps": steps}, "V=5: token embeddings")
    assert fig.layout.sliders[0].active == 2 and fig.frames[2].name == "200"
    assert list(fig.data[-1].x) == [e[0] for e in snaps[-1]["W_E"]]  # the shown dots: the last frame
    assert "step 200" in fig.layout.title.text and len(fig.layout.title.text.split("<br>")[0]) < 60
