"""Pack authoring tools, never on the purchase path: ``capture`` (bundles without personal data),
``dryrun`` (the pre-fence flow on a phone without the server), ``inspect`` / ``explain`` (what a pack
reads on a dump, and why; ``readings`` is the table of what inspect prints), ``packtest`` (``pack test``
/ ``pack accept`` on stored captures), and ``make_pack`` / ``make_after_submit`` (the generators of the
shipped packs)."""
