#!/bin/bash
cat hint.txt >> notes.txt
