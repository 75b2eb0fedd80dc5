"""The post: "Sparse attention 4: previous token head"."""

from ...claims.catalogue import Post, register_post

POST = register_post(
    Post(
        key="000",
        title="Sparse attention 4: previous token head",
        author="Ziming Liu",
        date="2026-01-13",
        seed="000_0f0fdff7da957e3e.txt",
        subject="prev_token_toy",
        needs_model=False,
        order=3,
    )
)
