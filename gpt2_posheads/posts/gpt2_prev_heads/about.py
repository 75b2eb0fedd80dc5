"""The post: "The positional embedding matrix and previous-token heads: how do they actually work?"."""

import sys

from ...claims.catalogue import Post, declare, register_post

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


def claim_script(name: str, **spec):
    """Declare a claim function of the post as command ``name`` (:func:`~gpt2_posheads.claims.catalogue.declare`),
    its help its module's doc followed by where the claim is a function."""

    def register(fn):
        where, path = f"{fn.__module__.rpartition('.')[0]}.{fn.__name__}", fn.__module__.replace(".", "/") + ".py"
        usage = f"{(sys.modules[fn.__module__].__doc__ or '').rstrip()}\nThe claim as a function: {where}\n({path}).\n"
        return declare(POST, name, usage=usage, **spec)(fn)

    return register
