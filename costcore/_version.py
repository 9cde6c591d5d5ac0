"""Version of the pricing contract; the compiled kernel embeds the same string."""

KERNEL_VERSION = "2.1.0"
