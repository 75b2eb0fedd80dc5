"""The post: "Sparse attention 3: inefficiency of extracting similar content"."""

from ...claims.catalogue import Post, register_post

POST = register_post(
    Post(
        key="001",
        title="Sparse attention 3: inefficiency of extracting similar content",
        author="Ziming Liu",
        date="2026-01-12",
        seed="001_40b321c40389bd3f.txt",
        subject="similar_content",
        needs_model=False,
        order=2,
    )
)
