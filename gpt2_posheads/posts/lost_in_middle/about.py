"""The post: "Sparse attention 7: stacked causal attention as implicit positions, and lost in the middle"."""

from ...claims.catalogue import Post, register_post

POST = register_post(
    Post(
        key="002",
        title="Sparse attention 7: stacked causal attention as implicit positions, and lost in the middle",
        author="Ziming Liu",
        date="2026-01-31",
        seed="002_05fa633ad24e0e9c.txt",
        subject="lost_in_middle",
        needs_model=False,
        order=4,
    )
)
