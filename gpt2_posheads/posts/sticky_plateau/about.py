"""The post: "Sparse attention 1: sticky plateau and rank collapse"."""

from ...claims.catalogue import Post, register_post

POST = register_post(
    Post(
        key="003",
        title="Sparse attention 1: sticky plateau and rank collapse",
        author="Ziming Liu",
        date="2026-01-08",
        seed="003_6c0dc1ca34b13b48.txt",
        subject="sticky_plateau",
        needs_model=False,
        order=1,
    )
)
