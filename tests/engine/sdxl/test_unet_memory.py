"""What the UNet keeps alive: a block's input dies inside the block, as soon as its first
resnet has used it (the 128x128 input of SDXL's last up block is 42 MB)."""

from __future__ import annotations

import weakref

from engine.sdxl import UNet


def test_each_block_input_is_freed_before_the_blocks_second_resnet(tiny_unet):
    inputs = tiny_unet.inputs(batch=1, h=16, w=16, tokens=77)
    with UNet.load(tiny_unet.folder, preset="rpi-lowmem") as unet:
        inputs_of: dict[str, weakref.ref] = {}
        alive_at_second_resnet: dict[str, bool] = {}

        def watch(name, block):
            def run(*args):
                h = args[1] if name.startswith(("down", "up")) else args[0]
                inputs_of[name] = weakref.ref(h[0] if isinstance(h, list) else h)
                return block(*args)
            return run

        unet.down_block = watch("down", UNet.down_block.__get__(unet))
        unet.up_block = watch("up", UNet.up_block.__get__(unet))
        unet.mid_block = watch("mid", UNet.mid_block.__get__(unet))
        resnet = unet.resnet

        def second_resnet(p, x, emb):
            kind = p.split("_")[0]
            if p.endswith("resnets.1"):
                alive_at_second_resnet[p] = inputs_of[kind]() is not None
            return resnet(p, x, emb)

        unet.resnet = second_resnet
        unet(*inputs)
    assert alive_at_second_resnet, "no block with two resnets was seen"
    assert not any(alive_at_second_resnet.values()), alive_at_second_resnet
