"""The post: "The positional embedding matrix and previous-token heads: how do they actually work?"."""

from ...claims.catalogue import Post, register_post

POST = register_post(
    Post(
        key="004",
        title="The positional embedding matrix and previous-token heads: how do they actually work?",
        author="not named in the seed",
        date="not given in the seed",
        seed="004_4e3a045ca875b10c.txt",
        subject="gpt2_prev_heads",
        needs_model=True,
        order=0,
    )
)
