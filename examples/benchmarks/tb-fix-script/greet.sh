#!/bin/bash
echo "Goodbye, $2."
